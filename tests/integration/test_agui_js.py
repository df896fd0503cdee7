"""AG-UI 1.0 at /agui: the official `@ag-ui/client` HttpAgent, unmodified, on real processes (one
runtime, two gateways) driving the native opspilot agent (js/agui_flow.mjs): an approval that
ends the AG-UI run with RUN_FINISHED outcome interrupt on pod A and is answered with `resume[]`
on pod B (twice at once: one restart), a live follow and exact `Last-Event-ID` reconnects on the
other pod, a choice and a form answered by their responseSchemas; then bad input, refused with a
clear 4xx before anything changes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.node import run_node
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.secrets import TEST_SECRET

SCRIPT = Path(__file__).parent / "js" / "agui_flow.mjs"

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def gateways(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    a = start_gateway(base_env, runtime.addr, name="gateway-agui-a")
    b = start_gateway(base_env, runtime.addr, name="gateway-agui-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _second_instance(db: Any, service: str) -> str:
    second = f"{service}-2"
    await db.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        second,
        service,
    )
    return second


async def test_the_official_client_runs_an_approval_and_every_question_across_pods(gateways, db):
    service, instance = await abnormal_service(db, prefix="agui")
    choice, first = await abnormal_service(db, prefix="aguisel")
    second = await _second_instance(db, choice)
    scale, _ = await abnormal_service(db, prefix="aguiinp")
    token = issue_token(TEST_SECRET, "alice")
    r = await run_node(str(SCRIPT), gateways[0], gateways[1], token, service, choice, scale)

    # The first AG-UI run: the client's ids echoed, text, then the interrupt as the outcome.
    first_run = r["first"]
    started = first_run["runStarted"]
    assert started["type"] == "RUN_STARTED"
    run_id = r["approvalRuns"][0]
    assert started["runId"] == first_run["finishedRunId"] == run_id
    assert started["threadId"] == first_run["finishedThreadId"]
    assert first_run["types"][-2:] == ["STATE_SNAPSHOT", "RUN_FINISHED"], first_run["types"]
    # OpsPilot looks the instances up first (a read tool, no approval): a step with its call.
    assert first_run["types"][:8] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
    ], first_run["types"]
    # Tether's stored history wins: the client's own copy of the turn is replaced by Tether's.
    (turn,) = first_run["snapshot"]
    assert turn["role"] == "user" and turn["id"].startswith("msg_"), turn
    assert turn["content"] == f"restart the abnormal {service} instance"
    interrupt = first_run["interrupt"]
    assert interrupt["id"].startswith("int_") and interrupt["reason"] == "tool_approval"
    # The call the card is about was streamed before it (AG-UI's approval pattern), no result.
    assert interrupt["toolCallId"] in first_run["toolCalls"], first_run["toolCalls"]
    assert interrupt["toolCallId"] not in first_run["results"]
    assert interrupt["message"] and interrupt["expiresAt"]
    assert interrupt["responseSchema"]["properties"]["decision"]["enum"] == ["approve", "reject"]
    assert interrupt["metadata"]["tether"]["kind"] == "confirm_action"
    assert interrupt["metadata"]["tether"]["card"]["tool"] == "restart_instance"
    # Read back on the other pod: the same events, each with its own id; every cut exact.
    assert first_run["replayEqual"]
    ids = first_run["ids"]
    assert all(ids) and len(set(ids)) == len(ids)
    assert [c["cut"] for c in first_run["cuts"]] == [1, len(ids) // 2, len(ids) - 1, len(ids)]
    assert all(c["exact"] for c in first_run["cuts"]), first_run["cuts"]
    assert r["unansweredRefused"], "the official client refuses a run that skips the interrupt"

    # The answer on pod B, twice at once: one restart, the same events for both tabs.
    resumed = r["resumed"]
    assert resumed["runStarted"]["runId"] == r["approvalRuns"][1]
    assert resumed["types"][:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
    # The resumed run's snapshot: the turn, then what the first run streamed, with its ids:
    # the lookup's call and result, then the gated call (no result yet).
    assert [m["role"] for m in resumed["snapshot"]] == ["user", "assistant", "tool", "assistant"]
    assert resumed["snapshot"][0] == turn
    gated = resumed["snapshot"][-1]["toolCalls"]
    assert [c["id"] for c in gated] == [interrupt["toolCallId"]]
    assert resumed["finished"]["outcome"] == {"type": "success"}
    # The resumed run: the approved call's result (no second TOOL_CALL_START), in its step.
    assert interrupt["toolCallId"] in resumed["results"]
    assert interrupt["toolCallId"] not in resumed["toolCalls"]
    assert resumed["types"].index("STEP_STARTED") < resumed["types"].index("STEP_FINISHED")
    assert resumed["toolResults"] and resumed["text"].strip()
    assert resumed["twinSame"]
    assert await executions(db, instance) == 1
    assert resumed["pendingAfter"] == 0
    assert resumed["messages"][-1] == "assistant"
    # Pod A followed the resumed run live, from before it had events to its end: the same.
    assert resumed["liveEqual"] and resumed["liveIdsUnique"]
    assert all(c["exact"] for c in resumed["cuts"]), resumed["cuts"]

    # A choice and a form, each cut mid-stream on pod A and finished on pod B exactly.
    sel = r["choice"]
    assert sel["cutExact"] and sel["end"] == "success"
    assert sel["reasons"][0] == "select_option", sel["reasons"]
    options = sel["select_option"]["responseSchema"]["properties"]["value"]["oneOf"]
    assert [o["const"] for o in options] == [first, second]
    statuses = dict(
        await db.fetch("SELECT id, status FROM inv_instance WHERE id = ANY($1)", [first, second])
    )
    assert statuses == {first: "abnormal", second: "healthy"}
    form = r["form"]
    assert form["cutExact"] and form["end"] == "success"
    assert form["reasons"][0] == "input_required", form["reasons"]
    schema = form["input_required"]["responseSchema"]
    assert schema["required"] == ["replicas"] and schema["properties"]["replicas"]["maximum"] == 50


async def _counts(db: Any) -> tuple[int, int, int]:
    return (
        await db.fetchval("SELECT count(*) FROM conversation WHERE user_id = 'alice'"),
        await db.fetchval("SELECT count(*) FROM run WHERE user_id = 'alice'"),
        await db.fetchval("SELECT count(*) FROM client_ref WHERE user_id = 'alice'"),
    )


async def test_bad_input_is_a_clear_4xx_and_changes_nothing(gateways, db, http):
    base = gateways[0]
    auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
    turn = [{"id": "m1", "role": "user", "content": "hello"}]

    def body(**over: Any) -> dict[str, Any]:
        return {"threadId": str(uuid.uuid4()), "runId": str(uuid.uuid4()), "messages": turn} | over

    before = await _counts(db)
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("/agui/opspilot", body(threadId=None), 400, "threadId"),
        ("/agui/opspilot", body(runId="has spaces"), 400, "runId"),
        ("/agui/opspilot", body(messages=[]), 400, "new turn"),
        (
            "/agui/opspilot",
            body(messages=[{"id": "a", "role": "assistant", "content": "x"}]),
            400,
            "new turn",
        ),
        ("/agui/opspilot", body(forwardedProps={"tether": {"title": 5}}), 400, "title"),
        (
            "/agui/opspilot",
            body(resume=[{"interruptId": "int_x", "status": "maybe"}]),
            400,
            "status",
        ),
        ("/agui/nosuchagent", body(), 404, "not found"),
        # An answer on a thread that waits on nothing: refused, no conversation made for it.
        (
            "/agui/opspilot",
            body(resume=[{"interruptId": "int_x", "status": "resolved"}]),
            409,
            "no interrupt",
        ),
    ]
    for path, payload, status, words in cases:
        async with http.post(base + path, json=payload, headers=auth) as resp:
            answer = await resp.json()
            assert resp.status == status, (payload, answer)
            assert words in answer["error"]["message"], answer
    async with http.post(base + "/agui/opspilot", json=body()) as resp:
        assert resp.status == 401
    # The session cookie acts only with its CSRF token, from this origin (as on /v1).
    async with http.post(base + "/v1/session", headers=auth) as resp:
        session = resp.cookies["tether_session"].value
        csrf = (await resp.json())["csrfToken"]
    cookie = {"Cookie": f"tether_session={session}", "Origin": base}
    async with http.post(base + "/agui/opspilot", json=body(), headers=cookie) as resp:
        assert resp.status == 403 and (await resp.json())["error"]["code"] == "CSRF_TOKEN_INVALID"
    async with http.get(base + f"/agui/opspilot/runs/{uuid.uuid4()}/events", headers=auth) as resp:
        assert resp.status == 404
    assert await _counts(db) == before
    with_csrf = {**cookie, "X-CSRF-Token": csrf}
    mine = body()
    async with http.post(base + "/agui/opspilot", json=mine, headers=with_csrf) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers["Content-Location"] == f"/agui/opspilot/runs/{mine['runId']}/events"
        assert await resp.content.readuntil(b"\n\n") == b"retry: 2000\n\n"
        assert '"type":"RUN_STARTED"' in (await resp.content.readuntil(b"\n\n")).decode()
    # Client ids are per user: bob neither reads alice's run nor answers on her thread.
    bob = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'bob')}"}
    events = f"/agui/opspilot/runs/{mine['runId']}/events"
    async with http.get(base + events, headers=bob) as resp:
        assert resp.status == 404
    async with http.get(base + events, headers=auth) as resp:
        assert resp.status == 200
    answer = {"interruptId": "int_x", "status": "resolved", "payload": True}
    same_thread = body(threadId=mine["threadId"], messages=[], resume=[answer])
    async with http.post(base + "/agui/opspilot", json=same_thread, headers=bob) as resp:
        assert resp.status == 409, await resp.text()
    # The same runId again on another thread: CLIENT_ID_TAKEN, nothing made or started.
    before = await _counts(db)
    again = body(runId=mine["runId"])
    async with http.post(base + "/agui/opspilot", json=again, headers=auth) as resp:
        answer_body = await resp.json()
        assert resp.status == 409 and answer_body["error"]["code"] == "CLIENT_ID_TAKEN"
    assert await _counts(db) == before
