"""A worker renews the leases of all the runs it executes in one statement a beat
(Worker._heartbeat, runs.renew_many), against the real Postgres: a lease that still holds is
extended, a cancel requested reaches the run's executor, a run whose lease was taken over is
stopped, and the statements do not grow with the runs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from tether_runtime.engine.worker import Worker, _Held
from tether_runtime.store import runs
from tether_testkit.running_runs import running_run

TTL_S = 0.6  # a beat every 0.2 s


async def _lease_left(pool: Any, run_id: str) -> float:
    return float(
        await pool.fetchval(
            "SELECT extract(epoch FROM lease_expires_at - now()) FROM run WHERE id = $1", run_id
        )
    )


async def test_one_statement_renews_every_lease_a_worker_holds(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with pool.acquire() as conn:
        held_runs = [await running_run(conn, f"beat {i}", owner="W") for i in range(3)]
        taken = await running_run(conn, "taken over", owner="W")
        await conn.execute(  # another worker took it over: its epoch moved on
            "UPDATE run SET lease_epoch = lease_epoch + 1, lease_owner = 'V' WHERE id = $1",
            taken.id,
        )
        await conn.execute("UPDATE run SET cancel_requested = true WHERE id = $1", held_runs[0].id)
    statements: list[int] = []
    renew_many = runs.renew_many

    async def counted(conn: Any, leases: Any, ttl_s: float) -> tuple[dict[str, bool], set[str]]:
        statements.append(len(leases))
        return await renew_many(conn, leases, ttl_s)

    monkeypatch.setattr(runs, "renew_many", counted)
    engine = SimpleNamespace(
        pool=pool, settings=SimpleNamespace(lease_ttl_s=TTL_S, store_ride_out_s=5.0)
    )
    worker = Worker(engine)  # type: ignore[arg-type]
    sleeping = [asyncio.create_task(asyncio.sleep(60)) for _ in range(4)]
    executors = [SimpleNamespace(cancel_requested=False) for _ in range(4)]
    async with pool.acquire() as conn:  # one more, ended by itself: left alone, not "lost"
        done = await running_run(conn, "ended", owner="W")
        await conn.execute("UPDATE run SET status = 'completed' WHERE id = $1", done.id)
    finishing = asyncio.create_task(asyncio.sleep(60))
    worker._held[done.id] = _Held(done, finishing, SimpleNamespace(cancel_requested=False))  # type: ignore[arg-type]
    for run, task, ex in zip([*held_runs, taken], sleeping, executors, strict=True):
        worker._held[run.id] = _Held(run, task, ex)  # type: ignore[arg-type]
    beat = asyncio.create_task(worker._heartbeat())
    try:
        await asyncio.sleep(TTL_S * 2)  # a beat every third of the lease: about 5
        for run in held_runs:  # renewed all along: never below two thirds of a lease left
            assert await _lease_left(pool, run.id) > TTL_S / 3
        assert executors[0].cancel_requested is True  # the cancel reached its executor
        assert executors[1].cancel_requested is False
        assert sleeping[3].cancelled() or sleeping[3].cancelling()  # the taken-over run stopped
        assert taken.id not in worker._held
        assert not any(t.done() for t in sleeping[:3])
        assert not finishing.done() and done.id in worker._held  # not taken for a loss
        # one statement a beat for the whole worker, not one a run
        assert 3 <= len(statements) <= 7, statements
        assert statements[0] == 5 and set(statements[1:]) == {4}, statements
    finally:
        beat.cancel()
        for t in (*sleeping, finishing):
            t.cancel()
        await asyncio.gather(beat, *sleeping, finishing, return_exceptions=True)


async def test_renew_many_tells_a_lease_kept_from_one_lost_and_one_ended(pool: Any) -> None:
    async with pool.acquire() as conn:
        a = await running_run(conn, "a", owner="W")
        ended = await running_run(conn, "ended", owner="W")
        taken = await running_run(conn, "taken", owner="W")
        await conn.execute("UPDATE run SET status = 'completed' WHERE id = $1", ended.id)
        await conn.execute("UPDATE run SET lease_epoch = lease_epoch + 1 WHERE id = $1", taken.id)
        held = [(r.id, r.lease_epoch) for r in (a, ended, taken)] + [("run_gone", 1)]
        kept, lost = await runs.renew_many(conn, held, 5)
        assert kept == {a.id: False}
        assert lost == {taken.id, "run_gone"}  # the run that ended its lease itself is neither
        assert await runs.renew(conn, a.id, a.lease_epoch, 5) is False
        assert await runs.renew(conn, ended.id, ended.lease_epoch, 5) is None
        assert await runs.renew_many(conn, [], 5) == ({}, set())


async def test_a_beat_that_fails_unexpectedly_does_not_end_the_heartbeat(
    pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One beat holds every lease of the worker: an error it did not foresee is retried as a
    store outage is, not the end of every run's renewal."""
    async with pool.acquire() as conn:
        run = await running_run(conn, "unforeseen", owner="W")
    renew_many = runs.renew_many
    calls: list[int] = []

    async def fails_once(conn: Any, leases: Any, ttl_s: float) -> tuple[dict[str, bool], set[str]]:
        calls.append(len(leases))
        if len(calls) == 1:
            raise RuntimeError("a bug in one beat")
        return await renew_many(conn, leases, ttl_s)

    monkeypatch.setattr(runs, "renew_many", fails_once)
    engine = SimpleNamespace(
        pool=pool, settings=SimpleNamespace(lease_ttl_s=TTL_S, store_ride_out_s=5.0)
    )
    worker = Worker(engine)  # type: ignore[arg-type]
    sleeping = asyncio.create_task(asyncio.sleep(60))
    worker._held[run.id] = _Held(run, sleeping, SimpleNamespace(cancel_requested=False))  # type: ignore[arg-type]
    beat = asyncio.create_task(worker._heartbeat())
    try:
        await asyncio.sleep(TTL_S)
        assert not beat.done()
        assert len(calls) >= 2  # retried after the failure
        assert await _lease_left(pool, run.id) > TTL_S / 3
        assert not sleeping.done()
    finally:
        beat.cancel()
        sleeping.cancel()
        await asyncio.gather(beat, sleeping, return_exceptions=True)
