"""The store side of concurrent_runs (migration 0013, store/run_admission.py), on a database no
runtime works on: the admission statement per policy, the trigger that queues a waiting run when
the run before it ends, and the sweep that queues one whose predecessor ended while it was being
inserted (the trigger then saw nothing to queue)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, run_admission
from tether_runtime.store.db import create_pool


@pytest.fixture
async def store(private_env: dict[str, str]) -> AsyncIterator[Any]:
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=1)
    async with pool.acquire() as conn:
        yield conn
    await pool.close()


async def _start(conn: Any, conv: str, policy: str) -> run_admission.Admission:
    run_id = new_id("run")
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conv)])
    async with conn.transaction():
        admission = await run_admission.start(
            conn,
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
