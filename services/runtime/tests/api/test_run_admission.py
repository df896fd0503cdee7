"""The store side of concurrent_runs (migration 0013, store/run_admission.py), on a database no
runtime works on: the admission statement per policy, the trigger that queues a waiting run when
the run before it ends, and the sweep that queues one whose predecessor ended while it was being
inserted (the trigger then saw nothing to queue)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether_common.ids import new_id, new_id_after
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, run_admission
from tether_runtime.store.db import create_pool


@pytest.fixture
async def store(private_env: dict[str, str]) -> AsyncIterator[Any]:
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=1)
    async with pool.acquire() as conn:
        yield conn
    await pool.close()


_last: list[str] = []


async def _start(conn: Any, conv: str, policy: str) -> run_admission.Admission:
    # Oldest first is id order (the promotion's): two runs made in one millisecond would sort by
    # their ids' random part, so each id is made to sort after the one before.
    run_id = new_id_after("run", _last[-1]) if _last else new_id("run")
    _last.append(run_id)
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conv)])
    async with conn.transaction():
        admission = await run_admission.start(
            conn,
            run_admission.Start(
                policy,
                run_id,
                conv,
                "alice",
                new_id("msg"),
                "hi",
                "opspilot",
                {},
                (kind, data),
                {"started": True},
            ),
        )
    assert admission is not None
    return admission


async def _status(conn: Any, run_id: str) -> str:
    return str(await conn.fetchval("SELECT status FROM run WHERE id = $1", run_id))


async def test_admission_per_policy_and_the_trigger_queueing_the_next(store: Any) -> None:
    conv = (await conversations.create(store, "alice", "t")).id
    first = await _start(store, conv, "enqueue")
    assert first.run is not None and first.run.status == "queued" and first.active == []
    refused = await _start(store, conv, "reject")
    assert refused.run is None and refused.active == [first.run.id]
    assert await store.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 1
    second = await _start(store, conv, "enqueue")
    third = await _start(store, conv, "interrupt")
    assert second.run is not None and third.run is not None
    assert (second.run.status, third.run.status) == ("waiting", "waiting")
    assert third.active == [first.run.id, second.run.id]
    assert second.run.checkpoint == {}  # its context is built when it starts
    # The first ends: the oldest waiting run is queued in the same transaction, and only it.
    await store.execute("UPDATE run SET status = 'completed' WHERE id = $1", first.run.id)
    assert await _status(store, second.run.id) == "queued"
    assert await _status(store, third.run.id) == "waiting"
    # Nothing for the sweep to do while a run is active.
    assert await run_admission.promote_stalled(store) == 0
    await store.execute("UPDATE run SET status = 'cancelled' WHERE id = $1", second.run.id)
    assert await _status(store, third.run.id) == "queued"


async def test_the_sweep_queues_a_run_left_waiting_with_nothing_before_it(store: Any) -> None:
    conv = (await conversations.create(store, "alice", "t")).id
    first = await _start(store, conv, "enqueue")
    second = await _start(store, conv, "enqueue")
    assert first.run is not None and second.run is not None
    # The first run's end as if it committed while the second's insert was in flight: without
    # the trigger, as its snapshot saw no waiting run.
    await store.execute("ALTER TABLE run DISABLE TRIGGER run_ended_promote_waiting")
    try:
        await store.execute("UPDATE run SET status = 'completed' WHERE id = $1", first.run.id)
    finally:
        await store.execute("ALTER TABLE run ENABLE TRIGGER run_ended_promote_waiting")
    assert await _status(store, second.run.id) == "waiting"
    assert await run_admission.promote_stalled(store) == 1
    assert await _status(store, second.run.id) == "queued"
    assert await run_admission.promote_stalled(store) == 0


def _a_start(
    conv: str,
    policy: str,
    text: str = "hi",
    user: str = "alice",
    graph_input: dict[str, Any] | None = None,
) -> run_admission.Start:
    run_id = new_id("run")
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conv)])
    return run_admission.Start(
        policy,
        run_id,
        conv,
        user,
        new_id("msg"),
        text,
        "opspilot",
        {"t": 1},
        (kind, data),
        {},
        graph_input,
    )


async def test_many_starts_in_one_statement_answer_as_one_statement_each(store: Any) -> None:
    """start_many: each start sees the ones before it in the same statement, as consecutive
    statements would; answers come in the starts' order."""
    one = (await conversations.create(store, "alice", "one")).id
    two = (await conversations.create(store, "alice", "two")).id
    three = (await conversations.create(store, "alice", "three")).id
    starts = [
        _a_start(one, "reject"),
        _a_start(two, "enqueue"),
        _a_start(one, "reject"),  # the first is active: refused, nothing stored
        _a_start(two, "enqueue"),  # behind the second: waiting
        _a_start(two, "enqueue", user="mallory"),  # not hers: not found
        _a_start(three, "parallel", graph_input={"messages": [{"role": "user", "content": "x"}]}),
    ]
    answers = await run_admission.start_many(store, starts)
    assert [a is not None for a in answers] == [True, True, True, True, False, True]
    first, second, refused, behind, _, graph = answers
    assert first is not None and first.run is not None and first.run.status == "queued"
    assert first.run.id == starts[0].run_id and first.run.trace_context == {"t": 1}
    assert second is not None and second.run is not None and second.run.status == "queued"
    assert refused is not None and refused.run is None and refused.active == [starts[0].run_id]
    assert behind is not None and behind.run is not None and behind.run.status == "waiting"
    assert behind.active == [starts[1].run_id]
    assert graph is not None and graph.run is not None and graph.run.status == "queued"
    assert await store.fetchval("SELECT input FROM run WHERE id = $1", starts[5].run_id) == {
        "messages": [{"role": "user", "content": "x"}]
    }
    assert await store.fetchval("SELECT input FROM run WHERE id = $1", starts[0].run_id) is None
    assert await store.fetchval("SELECT count(*) FROM run") == 4
    assert await store.fetchval("SELECT count(*) FROM run_event") == 4


async def test_admissions_that_arrive_together_share_a_statement_and_a_bad_one_fails_alone(
    private_env: dict[str, str],
) -> None:
    import asyncio

    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    try:
        async with pool.acquire() as conn:
            convs = [(await conversations.create(conn, "alice", f"c{i}")).id for i in range(20)]
        admissions = run_admission.Admissions(pool)
        statements: list[int] = []
        real = run_admission.start_many

        async def counting(conn: Any, starts: list[run_admission.Start]) -> Any:
            statements.append(len(starts))
            return await real(conn, starts)

        run_admission.start_many = counting  # type: ignore[assignment]
        try:
            starts = [_a_start(c, "enqueue") for c in convs]
            starts[7] = _a_start(convs[7], "enqueue", text="nul \x00 byte")  # Postgres refuses
            answers = await asyncio.gather(
                *(admissions.start(s) for s in starts), return_exceptions=True
            )
        finally:
            run_admission.start_many = real  # type: ignore[assignment]
        assert isinstance(answers[7], Exception), answers[7]
        good = [a for i, a in enumerate(answers) if i != 7]
        assert all(isinstance(a, run_admission.Admission) and a.run is not None for a in good)
        assert statements[0] == 20  # all twenty arrived while none was in flight: one statement
        assert len(statements) == 1 + 20  # it failed, then one each: only the bad start fails
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM run") == 19
            assert (
                await conn.fetchval("SELECT count(*) FROM run WHERE id = $1", starts[7].run_id) == 0
            )
    finally:
        await pool.close()


async def test_a_start_whose_caller_left_while_it_waited_is_not_sent(
    private_env: dict[str, str],
) -> None:
    """A StartRun cancelled while its admission waits for the next batch stores nothing: its
    caller would never learn of the run (and, with no key, would start another on a retry)."""
    import asyncio

    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            one = (await conversations.create(conn, "alice", "one")).id
            two = (await conversations.create(conn, "alice", "two")).id
        admissions = run_admission.Admissions(pool)
        kept, left = _a_start(one, "enqueue"), _a_start(two, "enqueue")
        waiting = asyncio.ensure_future(admissions.start(kept))
        leaving = asyncio.ensure_future(admissions.start(left))
        await asyncio.sleep(0)  # both queued, the batch not yet sent
        leaving.cancel()
        admitted = await waiting
        assert admitted is not None and admitted.run is not None
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM run WHERE id = $1", kept.run_id) == 1
            assert await conn.fetchval("SELECT count(*) FROM run WHERE id = $1", left.run_id) == 0
    finally:
        await pool.close()
