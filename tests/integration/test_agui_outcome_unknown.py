"""The fourth interrupt kind over AG-UI: the ledger test agent's unkeyed write, approved through
`resume[]`, its runtime killed inside the call. The AG-UI run that approved it reconnects through
Tether's extension (GET /agui/{agent}/runs/{runId}/events with Last-Event-ID) across the gap and
ends with RUN_FINISHED outcome interrupt `outcome_unknown`; an answer outside its responseSchema
is refused and changes nothing; `abandon` finishes the run, the effect still once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_common.auth import issue_token
from tether_testkit import stores
from tether_testkit.ledger import AGENT_ENV, create_ledger_database
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import Frame, SseReader

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(180)]

TERMINAL = ("RUN_FINISHED", "RUN_ERROR")


@pytest.fixture
async def ledger_env(admin_dsn: str, base_env: dict[str, str]) -> AsyncIterator[dict[str, str]]:
    dsn = await create_ledger_database(admin_dsn)
    yield {**base_env, **AGENT_ENV, "DATABASE_URL": dsn}
    await stores.drop_database(admin_dsn, dsn)


def _auth(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}", **extra}


async def _until(reader: SseReader, *types: str, timeout: float = 60) -> list[Frame]:
    """AG-UI events up to the first of `types` or a terminal one (or the stream's end)."""
    out: list[Frame] = []
    while (frame := await reader.next(timeout)) is not None:
        if frame.kind == "event":
            out.append(frame)
            if frame.json["type"] in types or frame.json["type"] in TERMINAL:
                break
    return out


async def _post(http: aiohttp.ClientSession, gw: str, body: dict[str, Any]) -> SseReader:
    resp = await http.post(f"{gw}/agui/ledger", json=body, headers=_auth())
    assert resp.status == 200, await resp.text()
    return SseReader(resp)


def unknown_call(seen: list[Frame]) -> str:
    """The tool call the run's progress is about."""
    progress = [f.json for f in seen if f.json["type"] == "CUSTOM"]
    return str(progress[0]["value"]["toolCallId"])


async def _wait_for(db: asyncpg.Connection, sql: str, n: int, timeout: float = 20) -> None:
    for _ in range(int(timeout / 0.05)):
        if await db.fetchval(sql) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {n}: {sql}")


async def test_outcome_unknown_round_trips_through_resume_and_a_reconnect(
    ledger_env: dict[str, str], procs: list[Proc]
) -> None:
    addr = f"127.0.0.1:{free_port()}"
    procs.append(start_runtime({**ledger_env, "LEDGER_HOLD_S": "8"}, name="rt-agui-1", addr=addr))
    gw = start_gateway(ledger_env, addr, name="gateway-agui-ledger")
    procs.append(gw)
    db = await asyncpg.connect(ledger_env["DATABASE_URL"])
    thread, first, second, third = (str(uuid.uuid4()) for _ in range(4))
    try:
        async with aiohttp.ClientSession() as http:
            turn = [{"id": "m1", "role": "user", "content": "send_unkeyed to bob"}]
            reader = await _post(
                http, gw.addr, {"threadId": thread, "runId": first, "messages": turn}
            )
            card = (await _until(reader))[-1].json
            reader.resp.close()
            assert card["outcome"]["type"] == "interrupt", card
            (confirm,) = card["outcome"]["interrupts"]
            assert confirm["reason"] == "tool_approval"
            assert confirm["metadata"]["tether"]["card"]["tool"] == "send_unkeyed"

            def answer(run_id: str, interrupt_id: str, payload: Any) -> dict[str, Any]:
                entry = {"interruptId": interrupt_id, "status": "resolved", "payload": payload}
                return {"threadId": thread, "runId": run_id, "messages": [], "resume": [entry]}

            approve = answer(second, confirm["id"], {"decision": "approve"})
            reader = await _post(http, gw.addr, approve)
            seen = await _until(reader, "CUSTOM")
            progress = seen[-1].json
            assert progress["name"] == "tether.tool_progress", progress
            assert progress["value"]["text"] == "asking the ledger"
            reader.resp.close()  # the page goes away (a reload) while the call runs
            await _wait_for(db, "SELECT count(*) FROM ledger_effect", 1)
            procs[0].kill()  # inside the call: its effect happened, its result was never saved
            procs.append(
                start_runtime({**ledger_env, "LEDGER_HOLD_S": "0"}, name="rt-agui-2", addr=addr)
            )
            # AG-UI has no reconnect: Tether's extension picks the run up after its last id.
            while seen[-1].json["type"] not in TERMINAL:
                resp = await http.get(
                    f"{gw.addr}/agui/ledger/runs/{second}/events",
                    headers=_auth(**{"Last-Event-ID": str(seen[-1].id)}),
                )
                if resp.status == 503:  # the gateway has no runtime yet: retry shortly
                    resp.close()
                    await asyncio.sleep(0.2)
                    continue
                assert resp.status == 200, await resp.text()
                reader = SseReader(resp)
                seen += await _until(reader)
                reader.resp.close()
            ids = [f.id for f in seen]
            assert len(set(ids)) == len(ids), ids  # no event twice across the reconnects
            # Exact across the crash: the whole AG-UI run read again is what was seen.
            again = SseReader(
                await http.get(f"{gw.addr}/agui/ledger/runs/{second}/events", headers=_auth())
            )
            assert [(f.id, f.data) for f in await _until(again)] == [(f.id, f.data) for f in seen]
            again.resp.close()
            async with http.get(
                f"{gw.addr}/agui/ledger/runs/{second}/events",
                headers=_auth(**{"Last-Event-ID": str(seen[-1].id)}),
            ) as resp:
                assert resp.status == 204  # over, and nothing left: stop reconnecting

            types = [f.json["type"] for f in seen]
            # The approved call was streamed with its card: here its step and progress.
            assert types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STEP_STARTED"], types
            assert "TOOL_CALL_START" not in types
            assert confirm["toolCallId"] and unknown_call(seen) == confirm["toolCallId"]
            ended = seen[-1].json
            assert (ended["type"], ended["runId"]) == ("RUN_FINISHED", second)
            (unknown,) = ended["outcome"]["interrupts"]
            assert unknown["reason"] == "outcome_unknown"
            assert unknown["toolCallId"] == confirm["toolCallId"]  # the same call, unknown now
            choices = unknown["responseSchema"]["properties"]["decision"]["enum"]
            assert choices == ["retry", "mark_done", "abandon"]
            assert unknown["metadata"]["tether"]["card"]["tool"] == "send_unkeyed"

            # An answer its responseSchema does not allow: refused, nothing changed.
            for wrong in ({"decision": "approve"}, {"decision": "maybe"}):
                async with http.post(
                    f"{gw.addr}/agui/ledger",
                    json=answer(third, unknown["id"], wrong),
                    headers=_auth(),
                ) as resp:
                    assert resp.status in (400, 422), await resp.text()
            status = await db.fetchval("SELECT status FROM interrupt WHERE id = $1", unknown["id"])
            assert status == "pending"

            reader = await _post(
                http, gw.addr, answer(third, unknown["id"], {"decision": "abandon"})
            )
            rest = await _until(reader)
            reader.resp.close()
            assert rest[0].json == {"type": "RUN_STARTED", "threadId": thread, "runId": third}
            assert rest[-1].json["outcome"] == {"type": "success"}, [f.json for f in rest]
            results = [f.json for f in rest if f.json["type"] == "TOOL_CALL_RESULT"]
            assert results and "abandon" in results[0]["content"], results
            assert await db.fetchval("SELECT count(*) FROM ledger_effect") == 1
    finally:
        await db.close()
