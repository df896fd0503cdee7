"""The LangGraph ops example, unmodified, on real runtime and gateway processes: stream to the
approval (the graph's own `interrupt()`), approve on ANOTHER gateway pod, stream to done; events
dense, each tool call announced once, and the write tool performed exactly once."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.auth import issue_token
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

# A runtime loading a graph imports langchain and langgraph: slower to start on a busy machine.
STARTUP_S = 90

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ASK = "checkout is slow, restart it if it is unhealthy"


def text_of(evs: list[Any]) -> str:
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


async def restarts(db: Any, service: str = "checkout") -> int:
    return int(await db.fetchval("SELECT count(*) FROM lgops_restart WHERE service = $1", service))


def tool_events(evs: list[Any]) -> list[tuple[str, str, str]]:
    out = []
    for e in evs:
        kind = types([e])[0]
        if kind == "tool_started":
            out.append((kind, e.tool_started.call_id, e.tool_started.tool))
        elif kind == "tool_finished":
            out.append((kind, e.tool_finished.call_id, e.tool_finished.tool))
    return out


async def test_grpc_stream_to_approval_approve_then_done_with_one_restart(env, procs, db):
    proc = start_runtime(env, name="runtime-lgops", timeout=STARTUP_S)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        run = (await c.start(conv, ASK, agent="lgops")).run
        evs = await c.events(run.id, until="interrupt")
        assert types(evs)[0] == "run_started"
        assert "Let me check checkout first." in text_of(evs)
        card = evs[-1].interrupt
        assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
        assert card.payload.title == "Restart checkout"
        assert card.payload.tool == "restart_service"
        assert card.payload.risk == "high"
        assert await restarts(db) == 0, "nothing is restarted before a person approves"

        await c.resume(run.id, card.interrupt_id)
        rest = await c.events(run.id, after=evs[-1].sequence)
        every = evs + rest
        assert types(rest)[-1] == "done", types(rest)
        assert_dense(every)
        calls = tool_events(every)
        started = [(cid, tool) for kind, cid, tool in calls if kind == "tool_started"]
        finished = [(cid, tool) for kind, cid, tool in calls if kind == "tool_finished"]
        assert [t for _, t in started] == ["get_service_status", "restart_service"], calls
        assert sorted(started) == sorted(finished), "each call started and finished once"
        assert "Done: checkout was restarted and is healthy again." in text_of(rest)
        assert await restarts(db) == 1
        status = await db.fetchval("SELECT status FROM lgops_service WHERE name = 'checkout'")
        assert status == "healthy"
        key = await db.fetchval("SELECT idempotency_key FROM lgops_restart")
        assert key and key.startswith(run.id + ":"), key
    finally:
        await c.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


def headers(user: str = "alice", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, user)}", **extra}


async def test_sse_approval_on_another_gateway_pod(env, procs, db, http):
    runtime = start_runtime(env, name="runtime-lgops-sse", timeout=STARTUP_S)
    procs.append(runtime)
    a = start_gateway(env, runtime.addr, name="gateway-a")
    b = start_gateway(env, runtime.addr, name="gateway-b")
    procs.extend([a, b])
    async with http.post(
        f"{a.addr}/v1/conversations", json={"title": "lg"}, headers=headers()
    ) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    body = {"text": ASK, "agent": "lgops", "idempotencyKey": uuid.uuid4().hex}
    async with http.post(
        f"{a.addr}/v1/conversations/{conv}/runs", json=body, headers=headers()
    ) as r:
        assert r.status == 201, await r.text()
        run_id = (await r.json())["run"]["id"]

    resp = await http.get(
        f"{a.addr}/v1/runs/{run_id}/events", headers=headers(Accept="text/event-stream")
    )
    reader = SseReader(resp)
    first = await reader.events_until("interrupt")
    card = first[-1].json
    assert card["type"] == "interrupt" and card["kind"] == "confirm_action", card
    assert await restarts(db) == 0

    # The approval goes to the other pod; the events keep coming on the first pod's stream.
    approval = {
        "interruptId": card["interruptId"],
        "decision": "approve",
        "idempotencyKey": uuid.uuid4().hex,
    }
    async with http.post(
        f"{b.addr}/v1/runs/{run_id}/resume", json=approval, headers=headers()
    ) as r:
        assert r.status == 202, await r.text()
    rest = await reader.rest()
    resp.close()
    frames = first + rest
    assert frames[-1].event == "done", [f.event for f in frames]
    ids = [int(f.id or 0) for f in frames]
    assert ids == list(range(1, len(ids) + 1)), ids
    started = [f.json["callId"] for f in frames if f.event == "tool_started"]
    finished = [f.json["callId"] for f in frames if f.event == "tool_finished"]
    assert len(started) == len(set(started)) == 2 and sorted(started) == sorted(finished)
    assert await restarts(db) == 1

    # A reader joining late on the other pod replays exactly the same events.
    again = await http.get(
        f"{b.addr}/v1/runs/{run_id}/events",
        headers=headers(Accept="text/event-stream", **{"Last-Event-ID": "0"}),
    )
    replay = await SseReader(again).rest()
    again.close()
    assert [(f.id, f.event, f.data) for f in replay] == [(f.id, f.event, f.data) for f in frames]


async def test_a_rejected_restart_is_not_performed_and_the_graph_says_so(env, procs, db):
    proc = start_runtime(env, name="runtime-lgops-reject", timeout=STARTUP_S)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
        evs = await c.events(run.id, until="interrupt")
        await c.resume(run.id, evs[-1].interrupt.interrupt_id, events_pb2.DECISION_REJECTED)
        rest = await c.events(run.id, after=evs[-1].sequence)
        assert types(rest)[-1] == "done", types(rest)
        assert_dense(evs + rest)
        assert "Nothing restarted: The restart of checkout was rejected" in text_of(rest)
        assert await restarts(db) == 0
    finally:
        await c.close()


async def test_an_expired_approval_resumes_the_graph_as_not_approved(env, procs, db):
    proc = start_runtime(
        {**env, "TETHER_INTERRUPT_TTL_S": "1"}, name="runtime-lgops-expiry", timeout=STARTUP_S
    )
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
        evs = await c.events(run.id)  # through the expiry to the end
        kinds = types(evs)
        assert kinds[-1] == "done", kinds
        resolved = [e.interrupt_resolved for e in evs if types([e]) == ["interrupt_resolved"]]
        assert [r.decision for r in resolved] == [events_pb2.DECISION_EXPIRED]
        assert_dense(evs)
        assert "was rejected; nothing was done" in text_of(evs)
        assert await restarts(db) == 0
    finally:
        await c.close()


async def test_the_graphs_card_names_the_grant_an_approver_needs(env, procs, db):
    """The confirm_action payload's action/scope: bob, without service.restart, cannot approve
    (and nothing changes); his run waits, and nothing is restarted."""
    proc = start_runtime(env, name="runtime-lgops-grant", timeout=STARTUP_S)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "bob"))
    try:
        run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
        evs = await c.events(run.id, until="interrupt")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await c.resume(run.id, evs[-1].interrupt.interrupt_id)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "service.restart on checkout" in (refused.value.details() or "")
        status = await db.fetchval("SELECT status FROM interrupt WHERE run_id = $1", run.id)
        assert status == "pending"
        assert await db.fetchval("SELECT status FROM run WHERE id = $1", run.id) == "interrupted"
        assert await restarts(db) == 0
    finally:
        await c.close()
