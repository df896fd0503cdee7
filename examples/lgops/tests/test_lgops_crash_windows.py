"""kill -9 of the runtime running the LangGraph ops graph in the windows test_lgops_crashes.py
and test_lgops_crash_stream.py leave open:

- approved, before the write: the approve node, resumed, is stopped (a table lock the test
  holds) on its re-check of the service, between the interrupt and the restart tool;
- inside the write tool, before its effect committed: the restart's INSERT waits on a lock,
  its tool-call claim already taken; the runtime that takes over cannot know whether it happened
  and asks a person (outcome_unknown); retried with the same key, it happens once;
- after the write, while the model streams the final answer.

Each time another runtime takes the run over; the events, replayed from 0, are dense, each tool
call announced once, the text not streamed twice, and the restart performed at most once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from lgops_brain import ops_brain
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.fake_llm import Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.processes import start_runtime
from tether_testkit.secrets import TEST_SECRET

# A runtime loading a graph imports langchain and langgraph: slower to start on a busy machine.
STARTUP_S = 90

pytestmark = [pytest.mark.slow(seconds=27), pytest.mark.timeout(180)]

ASK = "checkout is slow, restart it if it is unhealthy"
FIRST = "Let me check checkout first. "
SECOND = "checkout is degraded; I will restart it. "
FINAL = (
    "Done: checkout was restarted and is healthy again; its connections came back within "
    "seconds and the error rate is back to normal. "
)


def slow_final_brain(body: dict[str, Any]) -> Reply:
    """The ops model, its last answer (after the restart) streamed slowly."""
    reply = ops_brain(body)
    last = (body.get("messages") or [{}])[-1]
    if last.get("role") == "tool" and "was restarted" in str(last.get("content") or ""):
        return Reply(text=FINAL, delay_s=0.15)
    return reply


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(brain=slow_final_brain) as server:
        yield server  # type: ignore[misc]


async def restarts(db: Any) -> int:
    return int(await db.fetchval("SELECT count(*) FROM lgops_restart"))


def text_of(evs: list[Any]) -> str:
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


def started(evs: list[Any]) -> list[tuple[str, str]]:
    return [
        (e.tool_started.call_id, e.tool_started.tool) for e in evs if types([e]) == ["tool_started"]
    ]


def finished(evs: list[Any]) -> list[tuple[str, str]]:
    return [
        (e.tool_finished.call_id, e.tool_finished.tool)
        for e in evs
        if types([e]) == ["tool_finished"]
    ]


async def wait_blocked_on(db: Any, query_prefix: str) -> None:
    """Until a session of this database waits on a lock running a query starting so."""
    for _ in range(600):
        waiting = await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE $1",
            query_prefix + "%",
        )
        if waiting:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing waited on a lock in {query_prefix!r}")


async def to_the_interrupt(
    env: dict[str, str], procs: list[Any], name: str
) -> tuple[Any, Client, str, list[Any]]:
    first = start_runtime(env, name=name, timeout=STARTUP_S)
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run = (await c.start(await c.conversation(), ASK, agent="lgops")).run
    evs = await c.events(run.id, until="interrupt")
    assert evs[-1].interrupt.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
    return first, c, run.id, evs


async def replayed_twice(c: Client, run_id: str) -> list[Any]:
    """The whole run from 0, read twice: dense, and the same both times."""
    every = await c.events(run_id)
    assert_dense(every)
    again = await c.events(run_id)
    assert [e.SerializeToString() for e in again] == [e.SerializeToString() for e in every]
    return every


async def test_killed_after_the_approval_before_the_write(env, procs, db, lgops_dsn):
    first, c, run_id, evs = await to_the_interrupt(env, procs, "runtime-lgops-approved-1")
    locker = await asyncpg.connect(lgops_dsn)
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute("LOCK TABLE lgops_service IN ACCESS EXCLUSIVE MODE")
        await c.resume(run_id, evs[-1].interrupt.interrupt_id)
        # The resumed approve node re-checks the service before the restart: stopped there.
        await wait_blocked_on(db, "SELECT status FROM lgops_service")
        await c.close()
        first.kill()
        await tx.rollback()
    finally:
        await locker.close()
    assert await restarts(db) == 0

    second = start_runtime(env, name="runtime-lgops-approved-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        every = await replayed_twice(c, run_id)
        kinds = types(every)
        assert kinds[-1] == "done", kinds
        assert kinds.count("interrupt") == 1, "the approval is not asked for again"
        assert kinds.count("interrupt_resolved") == 1, kinds
        assert [t for _, t in started(every)] == ["get_service_status", "restart_service"]
        assert sorted(started(every)) == sorted(finished(every))
        assert text_of(every) == FIRST + SECOND + FINAL, text_of(every)
        assert await restarts(db) == 1
    finally:
        await c.close()


async def test_killed_inside_the_write_before_its_effect_a_person_decides(
    env, procs, db, lgops_dsn
):
    first, c, run_id, evs = await to_the_interrupt(env, procs, "runtime-lgops-inwrite-1")
    locker = await asyncpg.connect(lgops_dsn)
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute("LOCK TABLE lgops_restart IN ACCESS EXCLUSIVE MODE")
        await c.resume(run_id, evs[-1].interrupt.interrupt_id)
        # The call is claimed and running: its INSERT waits on the lock, nothing committed.
        await wait_blocked_on(db, "INSERT INTO lgops_restart")
        await c.close()
        first.kill()
        await tx.rollback()
    finally:
        await locker.close()

    second = start_runtime(env, name="runtime-lgops-inwrite-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        upto = evs + await c.events(run_id, after=evs[-1].sequence, until="interrupt", timeout=60)
        assert_dense(upto)
        intr = [e.interrupt for e in upto if types([e]) == ["interrupt"]]
        assert [i.kind for i in intr] == [
            resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION,
            resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN,
        ], intr
        assert intr[-1].payload.tool == "restart_service"
        assert await restarts(db) == 0, "the killed runtime's restart did not commit"
        await c.resume(run_id, intr[-1].interrupt_id, events_pb2.DECISION_RETRY)
        every = await replayed_twice(c, run_id)
        kinds = types(every)
        assert kinds[-1] == "done", kinds
        assert [t for _, t in started(every)] == ["get_service_status", "restart_service"]
        assert sorted(started(every)) == sorted(finished(every))
        assert text_of(every) == FIRST + SECOND + FINAL, text_of(every)
        assert await restarts(db) == 1
        key = await db.fetchval("SELECT idempotency_key FROM lgops_restart")
        assert key and key.startswith(run_id + ":"), key
    finally:
        await c.close()


async def test_killed_after_the_write_while_the_answer_streams(env, procs, db):
    first, c, run_id, evs = await to_the_interrupt(env, procs, "runtime-lgops-after-1")
    await c.resume(run_id, evs[-1].interrupt.interrupt_id)
    seen = list(evs)
    while FINAL[:20] not in text_of(seen):
        seen += await c.events(run_id, after=seen[-1].sequence, until="text_delta")
    await c.close()
    first.kill()
    assert await restarts(db) == 1
    assert not text_of(seen).endswith(FINAL), "killed before the answer was streamed"

    second = start_runtime(env, name="runtime-lgops-after-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        every = await replayed_twice(c, run_id)
        kinds = types(every)
        assert kinds[-1] == "done", kinds
        assert [e.SerializeToString() for e in every[: len(seen)]] == [
            e.SerializeToString() for e in seen
        ], "what was streamed before the kill is what the replay has"
        assert [t for _, t in started(every)] == ["get_service_status", "restart_service"]
        assert sorted(started(every)) == sorted(finished(every))
        assert text_of(every) == FIRST + SECOND + FINAL, text_of(every)
        assert await restarts(db) == 1
    finally:
        await c.close()
