"""kill -9 of the runtime while the graph's model streams, before the interrupt: another
runtime takes the run over, LangGraph re-runs the model node from Tether's checkpoint, and what
the first runtime already streamed is not streamed again (the fake model answers the same words,
as a deterministic model would). Events dense, one restart after the approval."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from lgops_brain import ops_brain
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.fake_llm import Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.processes import start_runtime
from tether_testkit.secrets import TEST_SECRET

# A runtime loading a graph imports langchain and langgraph: slower to start on a busy machine.
STARTUP_S = 90

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ASK = "checkout is slow, restart it if it is unhealthy"
FIRST = (
    "Let me check checkout first: it has been slow all morning, the on-call engineer asked "
    "for a look, and a restart is only worth it if it is unhealthy. "
)


def slow_brain(body: dict[str, Any]) -> Reply:
    reply = ops_brain(body)
    if (body.get("messages") or [{}])[-1].get("role") == "user":
        return Reply(text=FIRST, calls=reply.calls, delay_s=0.15)
    return reply


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(brain=slow_brain) as server:
        yield server  # type: ignore[misc]


def text_of(evs: list[Any]) -> str:
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


async def test_killed_while_the_model_streams_the_text_is_not_streamed_twice(env, procs, db):
    first = start_runtime(env, name="runtime-lgops-stream-1", timeout=STARTUP_S)
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
    seen: list[Any] = []
    while len([e for e in seen if types([e]) == ["text_delta"]]) < 3:
        after = seen[-1].sequence if seen else 0
        seen += await c.events(run.id, after=after, until="text_delta")
    await c.close()
    first.kill()
    assert 0 < len(text_of(seen)) < len(FIRST)

    second = start_runtime(env, name="runtime-lgops-stream-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        evs = await c.events(run.id, until="interrupt")
        assert types(evs)[-1] == "interrupt", types(evs)
        # The first step's words once, then the next step's (after the status check).
        assert text_of(evs) == FIRST + "checkout is degraded; I will restart it. ", text_of(evs)
        await c.resume(run.id, evs[-1].interrupt.interrupt_id)
        every = evs + await c.events(run.id, after=evs[-1].sequence)
        assert types(every)[-1] == "done", types(every)
        assert_dense(every)
        started = [e.tool_started.tool for e in every if types([e]) == ["tool_started"]]
        assert started == ["get_service_status", "restart_service"]
        assert await db.fetchval("SELECT count(*) FROM lgops_restart") == 1
        replay = await c.events(run.id)  # from 0: the same events, the first runtime's included
        assert [e.SerializeToString() for e in replay] == [e.SerializeToString() for e in every]
        assert [e.SerializeToString() for e in seen] == [
            e.SerializeToString() for e in replay[: len(seen)]
        ], "what the killed runtime streamed is what the replay has"
    finally:
        await c.close()


async def test_a_cancel_while_the_graph_runs_stops_it(env, procs, db):
    from tether.runtime.v1 import runtime_service_pb2 as pb

    proc = start_runtime(env, name="runtime-lgops-cancel", timeout=STARTUP_S)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
        first = await c.events(run.id, until="text_delta")
        await c.stub.CancelRun(
            pb.CancelRunRequest(run_id=run.id, reason="not now"), metadata=c.md, timeout=10
        )
        every = first + await c.events(run.id, after=first[-1].sequence)
        assert types(every)[-1] == "cancelled", types(every)
        assert "interrupt" not in types(every)
        assert_dense(every)
        assert len(text_of(every)) < len(FIRST), "the stream stopped at the cancel"
        assert await db.fetchval("SELECT status FROM run WHERE id = $1", run.id) == "cancelled"
    finally:
        await c.close()
