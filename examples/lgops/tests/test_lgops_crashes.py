"""kill -9 of the runtime running the LangGraph ops graph, the graph's progress in Tether's
Postgres checkpointer: a runtime killed while paused at the graph's interrupt() is resumed by
another process; one killed inside the restart tool (after its effect) is taken over, LangGraph
re-runs the approval node from its start, the graph's own re-check finds the service healthy and
the restart is not performed again. Events stay dense and each tool call is announced once
across both processes. (The write tool's own recovery, for a graph without such a re-check, is
libs/langgraph/tests/test_graph_agent.py's.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import start_runtime
from tether_testkit.secrets import TEST_SECRET

# A runtime loading a graph imports langchain and langgraph: slower to start on a busy machine.
STARTUP_S = 90

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ASK = "checkout is slow, restart it if it is unhealthy"


async def restarts(db: Any) -> int:
    return int(await db.fetchval("SELECT count(*) FROM lgops_restart"))


def calls(evs: list[Any], kind: str) -> list[tuple[str, str]]:
    field = {"tool_started": "tool_started", "tool_finished": "tool_finished"}[kind]
    return [
        (getattr(e, field).call_id, getattr(e, field).tool) for e in evs if types([e]) == [kind]
    ]


async def test_killed_while_paused_at_the_interrupt_another_process_resumes(env, procs, db):
    first = start_runtime(env, name="runtime-lgops-paused-1", timeout=STARTUP_S)
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
    evs = await c.events(run.id, until="interrupt")
    await c.close()
    first.kill()

    second = start_runtime(env, name="runtime-lgops-paused-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        await c.resume(run.id, evs[-1].interrupt.interrupt_id)
        rest = await c.events(run.id, after=evs[-1].sequence)
        every = evs + rest
        assert types(rest)[-1] == "done", types(rest)
        assert_dense(every)
        started = calls(every, "tool_started")
        assert [t for _, t in started] == ["get_service_status", "restart_service"]
        assert sorted(started) == sorted(calls(every, "tool_finished"))
        assert "Done: checkout was restarted" in "".join(
            e.text_delta.delta for e in rest if types([e]) == ["text_delta"]
        )
        assert await restarts(db) == 1
        replay = await c.events(run.id)  # from 0, on the process that took over
        assert [e.SerializeToString() for e in replay] == [e.SerializeToString() for e in every]
    finally:
        await c.close()


async def test_killed_inside_the_write_tool_it_is_not_performed_again(env, procs, db):
    first = start_runtime(
        {**env, "LGOPS_RESTART_PAUSE_S": "30"}, name="runtime-lgops-tool-1", timeout=STARTUP_S
    )
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
    evs = await c.events(run.id, until="interrupt")
    await c.resume(run.id, evs[-1].interrupt.interrupt_id)
    for _ in range(600):  # the restart happened; the tool now pauses inside the call
        if await restarts(db) == 1:
            break
        await asyncio.sleep(0.05)
    assert await restarts(db) == 1
    await c.close()
    first.kill()

    second = start_runtime(env, name="runtime-lgops-tool-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        every = await c.events(run.id)
        assert types(every)[-1] == "done", types(every)
        assert_dense(every)
        started = calls(every, "tool_started")
        assert [t for _, t in started] == ["get_service_status", "restart_service"], started
        assert sorted(started) == sorted(calls(every, "tool_finished"))
        restart = [e.tool_finished for e in every if types([e]) == ["tool_finished"]][-1]
        assert restart.tool == "restart_service"
        assert restart.summary == "checkout is healthy now; it was not restarted."
        assert await restarts(db) == 1, "the restart was performed again after the takeover"
        replay = await c.events(run.id)
        assert [e.SerializeToString() for e in replay] == [e.SerializeToString() for e in every]
    finally:
        await c.close()
