"""Every interrupt kind over HTTP and SSE through real processes (one runtime, two gateway pods):
the `interrupt` event carries its kind and card (options, inputSchema, title/details/preview);
an answer that does not fit is 422 INVALID_ANSWER and changes nothing; a fitting one, POSTed to
the other gateway than the one streaming, continues the same stream to `done`. The
outcome_unknown card comes from the ledger test agent's unkeyed write killed mid-call."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_common.auth import issue_token
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service
from tether_testkit.ledger import AGENT_ENV, create_ledger_database
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import Frame, SseReader

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def gateways(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    a = start_gateway(base_env, runtime.addr, name="gateway-questions-a")
    b = start_gateway(base_env, runtime.addr, name="gateway-questions-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


def _headers(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}", **extra}


async def _stream_new_run(http: aiohttp.ClientSession, base: str, text: str) -> SseReader:
    """Start a run with the one streaming request the web UI sends."""
    async with http.post(f"{base}/v1/conversations", json={}, headers=_headers()) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    resp = await http.post(
        f"{base}/v1/conversations/{conv}/runs",
        json={"text": text, "idempotencyKey": uuid.uuid4().hex},
        headers=_headers(Accept="text/event-stream"),
    )
    assert resp.status == 201, await resp.text()
    return SseReader(resp)


async def _resume(
    http: aiohttp.ClientSession, base: str, run_id: str, interrupt_id: str, **fields: Any
) -> tuple[int, dict[str, Any]]:
    body = {"interruptId": interrupt_id, "idempotencyKey": uuid.uuid4().hex, **fields}
    async with http.post(f"{base}/v1/runs/{run_id}/resume", json=body, headers=_headers()) as r:
        return r.status, await r.json()


async def _run(http: aiohttp.ClientSession, base: str, run_id: str) -> dict[str, Any]:
    async with http.get(f"{base}/v1/runs/{run_id}", headers=_headers()) as r:
        assert r.status == 200, await r.text()
        run: dict[str, Any] = (await r.json())["run"]
        return run


async def _refused(
    http: aiohttp.ClientSession, base: str, asked: dict[str, Any], **fields: Any
) -> str:
    """A 422 INVALID_ANSWER that changed nothing: the run still waits on the same interrupt."""
    run_id, interrupt_id = asked["runId"], asked["interruptId"]
    before = await _run(http, base, run_id)
    status, body = await _resume(http, base, run_id, interrupt_id, **fields)
    assert status == 422, (fields, status, body)
    assert body["error"]["code"] == "INVALID_ANSWER", body
    after = await _run(http, base, run_id)
    assert after == before, "a refused answer changed nothing"
    assert after["status"] == "interrupted"
    assert after["pendingInterrupt"]["id"] == interrupt_id
    assert after["pendingInterrupt"]["status"] == "pending"
    message: str = body["error"]["message"]
    return message


def _dense(frames: list[Frame]) -> None:
    ids = [int(f.id) for f in frames if f.id is not None]
    assert ids == list(range(1, len(ids) + 1)), ids


async def test_select_option_answered_on_the_other_gateway_continues_the_stream(
    gateways: tuple[str, str], http: aiohttp.ClientSession, db: Any
) -> None:
    a, b = gateways
    service, first = await abnormal_service(db, prefix="sel")
    second = f"{service}-2"
    await db.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        second,
        service,
    )
    reader = await _stream_new_run(http, a, f"restart the abnormal {service} instance")
    seen = await reader.events_until("interrupt")
    asked = seen[-1].json
    assert (seen[-1].event, asked["kind"]) == ("interrupt", "select_option")
    card = asked["payload"]
    assert [o["value"] for o in card["options"]] == [first, second]
    assert all(o["label"].startswith(o["value"]) for o in card["options"])
    assert card["title"] == f"Restart which {service} instance?"
    assert "Which one" in card["details"]
    assert card["inputSchema"] is None
    pending = (await _run(http, b, asked["runId"]))["pendingInterrupt"]
    assert (pending["kind"], pending["payload"]) == ("select_option", card)

    message = await _refused(http, b, asked, decision="respond", option="not-an-instance")
    assert first in message and second in message, message
    await _refused(http, b, asked, decision="approve")  # a confirmation's answer does not fit
    status, body = await _resume(
        http, b, asked["runId"], asked["interruptId"], decision="respond", option=second, fill={}
    )
    assert status == 400 and "at most one" in body["error"]["message"], body

    status, body = await _resume(
        http, b, asked["runId"], asked["interruptId"], decision="respond", option=second
    )
    assert status == 202, body
    more = await reader.events_until("interrupt")
    assert [f.event for f in more] == ["interrupt_resolved", "interrupt"]
    assert more[0].json["decision"] == "responded"
    confirm = more[-1].json
    assert confirm["kind"] == "confirm_action"
    p = confirm["payload"]
    assert p["title"] == "Restart instance"
    assert p["target"].startswith(f"instance {second}")
    assert p["details"] and p["preview"].startswith("status now: abnormal")
    assert (p["options"], p["inputSchema"]) == ([], None)
    status, body = await _resume(
        http, b, confirm["runId"], confirm["interruptId"], decision="approve"
    )
    assert status == 202, body
    rest = await reader.rest()
    reader.resp.close()
    assert rest[-1].event == "done", [f.event for f in rest]
    _dense(seen + more + rest)
    statuses = dict(
        await db.fetch("SELECT id, status FROM inv_instance WHERE service = $1", service)
    )
    assert statuses == {first: "abnormal", second: "healthy"}


async def test_provide_input_refuses_bad_fills_then_continues_on_the_other_gateway(
    gateways: tuple[str, str], http: aiohttp.ClientSession, db: Any
) -> None:
    a, b = gateways
    service, _ = await abnormal_service(db, prefix="inp")
    reader = await _stream_new_run(http, a, f"scale {service}")
    seen = await reader.events_until("interrupt")
    asked = seen[-1].json
    assert asked["kind"] == "provide_input"
    card = asked["payload"]
    schema = card["inputSchema"]
    assert schema["type"] == "object" and schema["required"] == ["replicas"]
    assert schema["properties"]["replicas"]["maximum"] == 50
    assert card["title"] == f"Scale {service}" and "How many replicas" in card["details"]
    assert card["options"] == []

    message = await _refused(http, b, asked, decision="respond", fill={"replicas": 99})
    assert message == "replicas: 99 is greater than the maximum of 50", message
    message = await _refused(http, b, asked, decision="respond", fill={"replicas": "seven"})
    assert message.startswith("replicas:"), message
    message = await _refused(http, b, asked, decision="respond", fill={})
    assert "'replicas' is a required property" in message, message
    await _refused(http, b, asked, decision="respond", fill={"replicas": 3, "count": 3})
    await _refused(http, b, asked, decision="respond", option="3")  # not a JSON object

    key = uuid.uuid4().hex
    body = {
        "interruptId": asked["interruptId"],
        "decision": "respond",
        "fill": {"replicas": 4},
        "idempotencyKey": key,
    }
    url = f"{b}/v1/runs/{asked['runId']}/resume"
    async with http.post(url, json=body, headers=_headers()) as r:
        assert r.status == 202, await r.text()
        assert (await r.json())["replayed"] is False
    # The same key and fill again (say, a retried click): the first answer, nothing new.
    async with http.post(url, json=body, headers=_headers()) as r:
        assert r.status == 202, await r.text()
        assert (await r.json())["replayed"] is True
    more = await reader.events_until("interrupt")
    assert [f.event for f in more] == ["interrupt_resolved", "interrupt"]
    confirm = more[-1].json
    assert confirm["kind"] == "confirm_action"
    assert confirm["payload"]["tool"] == "scale_service"
    assert "replicas=4" in confirm["payload"]["parameterSummary"]
    assert confirm["payload"]["preview"] == "1 replicas now -> 4"
    status, answer = await _resume(
        http, a, confirm["runId"], confirm["interruptId"], decision="approve"
    )
    assert status == 202, answer
    rest = await reader.rest()
    reader.resp.close()
    assert rest[-1].event == "done", [f.event for f in rest]
    _dense(seen + more + rest)
    replicas = await db.fetchval(
        "SELECT replicas FROM inv_service WHERE name = $1 AND env = 'prod'", service
    )
    assert replicas == 4


@pytest.fixture
async def ledger_env(admin_dsn: str, base_env: dict[str, str]) -> AsyncIterator[dict[str, str]]:
    dsn = await create_ledger_database(admin_dsn)
    yield {**base_env, **AGENT_ENV, "DATABASE_URL": dsn}
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()


async def _wait_for(db: asyncpg.Connection, sql: str, n: int, timeout: float = 20) -> None:
    for _ in range(int(timeout / 0.05)):
        if await db.fetchval(sql) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {n}: {sql}")


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_outcome_unknown_over_sse_after_a_kill_inside_the_call(
    ledger_env: dict[str, str], procs: list[Proc], http: aiohttp.ClientSession
) -> None:
    """The ledger agent's send_unkeyed killed mid-call: its step's progress, then, from the
    runtime that takes over at the same address, an outcome_unknown card on the stream; only
    retry / mark_done / abandon fit it."""
    addr = f"127.0.0.1:{free_port()}"
    procs.append(start_runtime({**ledger_env, "LEDGER_HOLD_S": "8"}, name="rt-q-1", addr=addr))
    gw = start_gateway(ledger_env, addr, name="gateway-questions-ledger")
    procs.append(gw)
    db = await asyncpg.connect(ledger_env["DATABASE_URL"])
    try:
        async with http.post(f"{gw.addr}/v1/conversations", json={}, headers=_headers()) as r:
            conv = (await r.json())["conversation"]["id"]
        resp = await http.post(
            f"{gw.addr}/v1/conversations/{conv}/runs",
            json={"text": "send_unkeyed to bob", "agent": "ledger"},
            headers=_headers(Accept="text/event-stream"),
        )
        assert resp.status == 201, await resp.text()
        reader = SseReader(resp)
        seen = await reader.events_until("interrupt")
        confirm = seen[-1].json
        assert confirm["kind"] == "confirm_action"
        assert confirm["payload"]["tool"] == "send_unkeyed"
        status, body = await _resume(
            http, gw.addr, confirm["runId"], confirm["interruptId"], decision="approve"
        )
        assert status == 202, body
        seen += await reader.events_until("tool_progress")
        progress = seen[-1].json
        assert (progress["tool"], progress["fraction"], progress["text"]) == (
            "send_unkeyed",
            0.25,
            "asking the ledger",
        )
        await _wait_for(db, "SELECT count(*) FROM ledger_effect", 1)
        procs[0].kill()
        procs.append(start_runtime({**ledger_env, "LEDGER_HOLD_S": "0"}, name="rt-q-2", addr=addr))
        # The stream may outlast the gap or end in it; a reader then resumes where it was.
        seen += await reader.events_until("interrupt", timeout=60)
        while seen[-1].event != "interrupt":
            reader.resp.close()
            reader = SseReader(
                await http.get(
                    f"{gw.addr}/v1/runs/{confirm['runId']}/events",
                    headers=_headers(Accept="text/event-stream", **{"Last-Event-ID": seen[-1].id}),
                )
            )
            seen += await reader.events_until("interrupt", timeout=60)
        asked = seen[-1].json
        assert asked["kind"] == "outcome_unknown"
        assert asked["payload"]["tool"] == "send_unkeyed"
        assert asked["payload"]["parameterSummary"]
        for wrong in ({"decision": "approve"}, {"decision": "respond", "option": "retry"}):
            await _refused(http, gw.addr, asked, **wrong)
        status, body = await _resume(
            http, gw.addr, asked["runId"], asked["interruptId"], decision="abandon"
        )
        assert status == 202, body
        rest = await reader.rest()
        reader.resp.close()
        assert [f.json.get("decision") for f in rest[:1]] == ["abandon"]
        assert rest[-1].event == "done", [f.event for f in rest]
        _dense(seen + rest)
        assert await db.fetchval("SELECT count(*) FROM ledger_effect") == 1
    finally:
        await db.close()
