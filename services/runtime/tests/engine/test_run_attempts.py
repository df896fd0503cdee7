"""Poison-run protection at the store level, against a private database: attempts counted per
claim and given back by a graceful release, the backoff before a run whose lease ran out is
claimable again, its place in the claim order, and the fenced failure of a run whose attempts
are spent (poison.py). Time is moved by shifting the run rows' timestamps, never waited out."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from tether_common.run_bus import EventBus
from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.engine import poison
from tether_runtime.store import conversations, event_log, runs
from tether_testkit.running_runs import queued_run


async def _queue(conn: Any, n: int) -> list[str]:
    conv = await conversations.create(conn, "alice", "poison")
    ids = []
    for i in range(n):
        run_id, run = await queued_run(conn, conv.id, text=f"hi {i}")
        assert run is not None
        ids.append(run_id)
    return ids


async def _pass(conn: Any, seconds: float) -> None:
    """Let `seconds` pass for every run: move each stored time back by that much."""
    await conn.execute(
        "UPDATE run SET queued_at = queued_at - make_interval(secs => $1), "
        "lease_expires_at = lease_expires_at - make_interval(secs => $1)",
        seconds,
    )


async def _attempts(conn: Any, run_id: str) -> int:
    return int(await conn.fetchval("SELECT attempts FROM run WHERE id = $1", run_id))


async def test_each_claim_counts_a_release_gives_it_back_and_a_pause_starts_over(
    pool: Any,
) -> None:
    async with pool.acquire() as conn:
        (run_id,) = await _queue(conn, 1)
        assert await _attempts(conn, run_id) == 0
        ((run, _),) = await runs.claim_batch(conn, "A", 30, 1, backoff_s=1)
        assert run.attempts == 1 and run.lease_epoch == 1

        # A graceful shutdown is not the run's fault: the claim is given back.
        assert await runs.release(conn, run_id, run.lease_epoch)
        assert await _attempts(conn, run_id) == 0
        ((run, took_over),) = await runs.claim_batch(conn, "B", 30, 1, backoff_s=1)
        assert run.attempts == 1 and run.lease_epoch == 2 and not took_over

        # Its worker dies twice: each takeover counts.
        for expected in (2, 3):
            await _pass(conn, 31 + 2 ** (expected - 2))
            ((run, took_over),) = await runs.claim_batch(conn, "C", 30, 1, backoff_s=1)
            assert took_over and run.attempts == expected

        # A zombie's release (an older epoch) gives nothing back.
        assert not await runs.release(conn, run_id, run.lease_epoch - 1)
        assert await _attempts(conn, run_id) == 3

        # The run reaches a pause: it is not a poison run, its count starts over.
        await runs.finish(conn, run_id, run.lease_epoch, "interrupted")
        assert await _attempts(conn, run_id) == 0
        # ...and a zombie's finish with an older epoch does not touch a later claim's count.
        await conn.execute("UPDATE run SET status = 'queued' WHERE id = $1", run_id)
        ((run, _),) = await runs.claim_batch(conn, "D", 30, 1, backoff_s=1)
        await runs.finish(conn, run_id, run.lease_epoch - 1, "failed")
        assert await _attempts(conn, run_id) == 1


async def test_the_first_takeover_after_a_crash_is_not_delayed(pool: Any) -> None:
    async with pool.acquire() as conn:
        (run_id,) = await _queue(conn, 1)
        await runs.claim_batch(conn, "A", 5, 1, backoff_s=10)
        await _pass(conn, 4)
        assert await runs.claim_batch(conn, "B", 5, 1, backoff_s=10) == []  # a live lease
        await _pass(conn, 1.5)
        ((run, took_over),) = await runs.claim_batch(conn, "B", 5, 1, backoff_s=10)
        assert run.id == run_id and took_over and run.attempts == 2


@pytest.mark.parametrize(
    ("attempts", "backoff"),
    [(2, 10.0), (3, 20.0), (4, 40.0), (5, 60.0), (30, 60.0)],  # doubling, capped at 60 s
)
async def test_an_expired_lease_is_claimable_only_after_its_backoff(
    pool: Any, attempts: int, backoff: float
) -> None:
    async with pool.acquire() as conn:
        (run_id,) = await _queue(conn, 1)
        ((run, _),) = await runs.claim_batch(conn, "A", 5, 1, backoff_s=10)
        await conn.execute("UPDATE run SET attempts = $2 WHERE id = $1", run_id, attempts)
        # The lease ran out `backoff - 2` seconds ago: still waiting.
        await _pass(conn, 5 + backoff - 2)
        assert await runs.claim_batch(conn, "B", 5, 1, backoff_s=10) == []
        await _pass(conn, 4)
        ((run, took_over),) = await runs.claim_batch(conn, "B", 5, 1, backoff_s=10)
        assert run.id == run_id and took_over and run.attempts == attempts + 1


async def test_a_takeover_lines_up_behind_runs_queued_before_it_was_claimable_again(
    pool: Any,
) -> None:
    """The poison run P was queued first. Under the old order (first queue time) it was taken
    before every other run each time its lease ran out; now its place is when it became claimable
    again, so the runs queued before that go first, and those queued after it come after."""
    ttl, backoff = 20.0, 10.0
    async with pool.acquire() as conn:
        (p,) = await _queue(conn, 1)
        await conn.execute("UPDATE run SET attempts = 1 WHERE id = $1", p)  # died once already
        ((run, _),) = await runs.claim_batch(conn, "A", ttl, 1, backoff_s=backoff)
        assert run.attempts == 2
        # Its place: when it would be claimable again if its worker died at once.
        place_s = await conn.fetchval(
            "SELECT extract(epoch FROM queued_at - lease_expires_at) FROM run WHERE id = $1", p
        )
        assert float(place_s) == pytest.approx(backoff, abs=0.01)
        before = await _queue(conn, 2)  # queued while P's worker ran (and died)
        await _pass(conn, ttl + backoff + 1)  # P's lease ran out and its backoff passed
        after = await _queue(conn, 2)  # queued after P was claimable again

        claimed = await runs.claim_batch(conn, "B", ttl, 10, backoff_s=backoff)
        assert [r.id for r, _ in claimed] == [*before, p, *after]
        assert [took_over for _, took_over in claimed] == [False, False, True, False, False]


async def test_a_batch_smaller_than_the_queue_takes_the_runs_queued_first(pool: Any) -> None:
    """Even when the takeover is claimable, a one-run claim takes the run queued before it
    became claimable again; the old order (first queue time) would have taken P."""
    ttl, backoff = 20.0, 10.0
    async with pool.acquire() as conn:
        (p,) = await _queue(conn, 1)
        await conn.execute("UPDATE run SET attempts = 1 WHERE id = $1", p)
        await runs.claim_batch(conn, "A", ttl, 1, backoff_s=backoff)
        (fresh,) = await _queue(conn, 1)
        await _pass(conn, ttl + backoff + 1)
        ((first, took_over),) = await runs.claim_batch(conn, "B", ttl, 1, backoff_s=backoff)
        assert first.id == fresh and not took_over
        ((second, took_over),) = await runs.claim_batch(conn, "B", ttl, 1, backoff_s=backoff)
        assert second.id == p and took_over and second.attempts == 3


async def _connected(bus: EventBus) -> None:
    for _ in range(100):  # the reader connects in the background
        if bus.connected:
            return
        await asyncio.sleep(0.05)


async def test_a_run_past_its_attempts_fails_fenced_with_a_dense_log_and_is_published(
    pool: Any, redis_url: str
) -> None:
    max_attempts = 3
    bus = EventBus(redis_url)
    await bus.start()
    try:
        async with pool.acquire() as conn:
            (run_id,) = await _queue(conn, 1)
            await conn.execute(
                "UPDATE run SET attempts = $2 WHERE id = $1", run_id, max_attempts
            )  # three workers died holding it
            ((run, _),) = await runs.claim_batch(conn, "A", 5, 1, backoff_s=0)
        assert run.attempts == max_attempts + 1
        assert poison.exhausted(run, max_attempts)
        assert not poison.exhausted(run, max_attempts + 1)

        # A worker holding an older claim cannot fail it.
        older = dataclasses.replace(run, lease_epoch=run.lease_epoch - 1)
        assert not await poison.give_up(pool, bus, older, max_attempts)
        poisoned = metrics.RUNS_POISONED._value.get()
        await _connected(bus)
        with bus.subscribe(run_id) as sub:
            assert await bus.confirmed(sub)
            assert await poison.give_up(pool, bus, run, max_attempts)
            (published,) = ev.split_batch(await asyncio.wait_for(sub.queue.get(), 5))
        assert metrics.RUNS_POISONED._value.get() == poisoned + 1
        # Giving up twice (a second worker with the same, now stale, claim) writes nothing.
        assert not await poison.give_up(pool, bus, run, max_attempts)

        async with pool.acquire() as conn:
            row = await runs.get(conn, run_id)
            stored = await event_log.read_after(conn, run_id, 0, 10)
        assert row is not None
        assert row.status == "failed" and row.attempts == 0 and row.lease_owner is None
        assert [seq for seq, _ in stored] == [1, 2]
        last = ev.RunEvent.FromString(stored[-1][1])
        assert last.WhichOneof("event") == "error"
        assert last.error.code == "RUN_ATTEMPTS_EXHAUSTED"
        assert "3 times in a row" in last.error.message
        assert published.SerializeToString() == stored[-1][1]
    finally:
        await bus.close()
