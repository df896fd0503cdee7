"""At most once through a kill -9 inside a write tool (DESIGN section 10), with the ledger test
agent: a tool that honours the key is called again with the same key (one effect); one that can
reconcile is asked instead of called; one that can do neither raises `outcome_unknown`, and each
of a person's three answers (retry, mark done, abandon) does exactly what it says. An answer that
does not fit the interrupt is refused and changes nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, reason, token, types
from tether_testkit.ledger import AGENT_ENV, create_ledger_database
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
async def ledger_dsn(admin_dsn: str) -> AsyncIterator[str]:
    """A database of this test's own, with the ledger agent's tables and alice's grant."""
    dsn = await create_ledger_database(admin_dsn)
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
def env(base_env: dict[str, str], ledger_dsn: str) -> dict[str, str]:
    return {**base_env, **AGENT_ENV, "DATABASE_URL": ledger_dsn}


async def _paused_runs(c: Client, texts: list[str]) -> list[tuple[str, events_pb2.RunEvent]]:
    """Start each run, in a conversation of its own (a second message to an agent while a run of
    its conversation is active waits for it: concurrent_runs "enqueue"), and read it to its
    confirmation card."""
    out = []
    for text in texts:
        conv = await c.conversation()
        run = (await c.start(conv, text, agent="ledger")).run
        evs = await c.events(run.id, until="interrupt")
        assert types(evs)[-1] == "interrupt", types(evs)
        out.append((run.id, evs[-1]))
    return out


async def _wait(db: asyncpg.Connection, sql: str, n: int, timeout: float = 20) -> None:
    for _ in range(int(timeout / 0.05)):
        if await db.fetchval(sql) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never reached {n}: {sql}")


async def _kill_inside_the_calls(
    env: dict[str, str], procs: list[Proc], c_for: str, texts: list[str]
) -> tuple[Client, asyncpg.Connection, list[tuple[str, events_pb2.RunEvent]]]:
    """Approve each run on a runtime whose calls are held open, kill -9 it once every effect
    happened but before any result was saved, and start a fresh runtime to take over."""
    first = start_runtime({**env, "LEDGER_HOLD_S": "8"}, name="runtime-ledger-1")
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, c_for))
    db = await asyncpg.connect(env["DATABASE_URL"])
    paused = await _paused_runs(c, texts)
    for run_id, intr in paused:
        await c.resume(run_id, intr.interrupt.interrupt_id)
    await _wait(db, "SELECT count(*) FROM ledger_effect", len(texts))
    assert await db.fetchval("SELECT count(*) FROM tool_call WHERE status = 'executing'") == len(
        texts
    )
    first.kill()
    await c.close()
    second = start_runtime({**env, "LEDGER_HOLD_S": "0"}, name="runtime-ledger-2")
    procs.append(second)
    return Client(second.addr, token(TEST_SECRET, c_for)), db, paused


async def _told(db: asyncpg.Connection, run_id: str) -> dict[str, object]:
    cp = json.loads(await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run_id))
    return json.loads(next(m["content"] for m in cp["messages"] if m["role"] == "tool"))


async def test_keyed_and_reconciled_tools_after_a_kill_have_one_effect(env, procs):
    c, db, paused = await _kill_inside_the_calls(
        env, procs, "alice", ["send_keyed to bob", "send_reconciled to carol"]
    )
    try:
        for run_id, intr in paused:
            rest = await c.events(run_id, after=intr.sequence)
            assert types(rest)[-1] == "done", types(rest)
            assert "interrupt" not in types(rest)[1:], "no person was needed"
            progress = [e.tool_progress for e in rest if types([e]) == ["tool_progress"]]
            tool = await db.fetchval("SELECT tool FROM tool_call WHERE run_id = $1", run_id)
            # Each call streams its progress (tool_progress): the keyed tool's first call (before
            # the kill) and the one made again after it; the reconciled tool's only call.
            expected = [(0.25, "asking the ledger")] * (2 if tool == "send_keyed" else 1)
            assert [(p.fraction, p.text) for p in progress] == expected
            assert_dense(rest, start=intr.sequence + 1)
        calls = dict(await db.fetch("SELECT tool, count(*) FROM ledger_call GROUP BY tool"))
        effects = dict(await db.fetch("SELECT tool, count(*) FROM ledger_effect GROUP BY tool"))
        # The keyed tool was called again with its key, and the ledger did nothing the second
        # time; the reconciled tool was asked, not called.
        assert calls == {"send_keyed": 2, "send_reconciled": 1}
        assert effects == {"send_keyed": 1, "send_reconciled": 1}
        keys = await db.fetch("SELECT DISTINCT key FROM ledger_call WHERE tool = 'send_keyed'")
        assert len(keys) == 1, "the second call carried the same idempotency key"
        for run_id, _ in paused:
            assert (await _told(db, run_id))["outcome"] == "ok"
    finally:
        await c.close()
        await db.close()


async def test_unkeyed_tool_after_a_kill_asks_a_person_and_each_answer_holds(env, procs):
    texts = ["send_unkeyed to r1", "send_unkeyed to r2", "send_unkeyed to r3"]
    c, db, paused = await _kill_inside_the_calls(env, procs, "alice", texts)
    try:
        unknown = {}
        for run_id, intr in paused:
            rest = await c.events(run_id, after=intr.sequence, until="interrupt")
            raised = rest[-1].interrupt
            assert raised.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN
            assert raised.payload.tool == "send_unkeyed"
            assert "cannot tell" in raised.payload.details
            unknown[run_id] = rest[-1]
        # Nothing was called again on the engine's own initiative.
        assert await db.fetchval("SELECT count(*) FROM ledger_call") == 3
        assert await db.fetchval("SELECT count(*) FROM ledger_effect") == 3

        (r1, i1), (r2, i2), (r3, i3) = ((r, unknown[r]) for r, _ in paused)
        # An answer of the wrong kind is refused and changes nothing.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.resume(r1, i1.interrupt.interrupt_id, events_pb2.DECISION_APPROVED)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason(err.value) == "INVALID_ANSWER"
        status = await db.fetchval(
            "SELECT status FROM interrupt WHERE id = $1", i1.interrupt.interrupt_id
        )
        assert status == "pending"
        await c.resume(r1, i1.interrupt.interrupt_id, events_pb2.DECISION_RETRY)
        await c.resume(r2, i2.interrupt.interrupt_id, events_pb2.DECISION_MARK_DONE)
        await c.resume(r3, i3.interrupt.interrupt_id, events_pb2.DECISION_ABANDON)
        for run_id, intr in ((r1, i1), (r2, i2), (r3, i3)):
            rest = await c.events(run_id, after=intr.sequence)
            assert types(rest)[0] == "interrupt_resolved"
            assert types(rest)[-1] == "done", types(rest)
            # Every answer ends the call's step for the people following the run.
            assert "tool_finished" in types(rest)
            assert_dense(rest, start=intr.sequence + 1)
        effects = dict(
            await db.fetch("SELECT recipient, count(*) FROM ledger_effect GROUP BY recipient")
        )
        # Retry: a person chose to send again (the tool cannot dedupe): a second effect.
        assert effects == {"r1": 2, "r2": 1, "r3": 1}
        assert (await _told(db, r1))["outcome"] == "ok"
        assert (await _told(db, r2))["outcome"] == "marked_done"
        assert (await _told(db, r3))["outcome"] == "abandoned"
        statuses = dict(await db.fetch("SELECT run_id, status FROM tool_call"))
        assert [statuses[r] for r in (r1, r2, r3)] == ["succeeded", "succeeded", "rejected"]
    finally:
        await c.close()
        await db.close()


async def test_limits_step_limit_deadline_and_transient_retries(env, procs):
    env = {
        **env,
        "TETHER_AGENTS": "tether_testkit.ledger_agent:agent,tether_testkit.ledger_agent:slowpoke",
        "PEEK_S": "0.3",
    }
    proc = start_runtime(env, name="runtime-limits")
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    db = await asyncpg.connect(env["DATABASE_URL"])
    try:
        conv = await c.conversation()
        looping = (await c.start(conv, "loop", agent="ledger")).run
        late = (await c.start(conv, "loop", agent="slowpoke")).run
        flaky = (await c.start(conv, "flaky 2", agent="ledger")).run
        evs = await c.events(looping.id)
        assert types(evs)[-1] == "error"
        assert evs[-1].error.code == "STEP_LIMIT_EXCEEDED"
        assert types(evs).count("tool_finished") == 5  # max_steps=5 model steps, each a peek
        evs = await c.events(late.id)
        assert types(evs)[-1] == "error"
        assert evs[-1].error.code == "DEADLINE_EXCEEDED"
        assert 2 <= types(evs).count("tool_finished") <= 5  # 0.3 s peeks within a 1 s budget
        evs = await c.events(flaky.id)
        assert types(evs)[-1] == "done"
        assert types(evs).count("tool_started") == 1  # retries are inside one call
        assert (await _told(db, flaky.id))["summary"] == "worked on attempt 3"
        assert await db.fetchval("SELECT count(*) FROM ledger_call WHERE tool = 'flaky'") == 3
        status = await db.fetchval("SELECT status FROM run WHERE id = $1", looping.id)
        assert status == "failed"
    finally:
        await c.close()
        await db.close()
