"""A run's writer waits out a store outage (TETHER_STORE_RIDE_OUT_S), against the real stores:
a write the store could not take is retried and lands once; one whose answer was lost is
recognised by the run's position and not written again; a run taken over meanwhile is fenced;
and a worker's own claim never takes over a run it is still executing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from tether_common.run_bus import EventBus
from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import RunRow
from tether_runtime.store import event_log, runs
from tether_runtime.store.db import create_pool
from tether_runtime.streams.event_sink import EventSink
from tether_runtime.streams.run_writer import RunWriter
from tether_testkit.running_runs import running_run

Append = Callable[[Any, Any], Awaitable[dict[str, bool]]]


@pytest.fixture
async def writing(private_env: dict[str, str], redis_url: str) -> AsyncIterator[Any]:
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    bus = EventBus(redis_url)
    await bus.start()
    try:
        yield pool, bus, EventSink(pool, bus)
    finally:
        await bus.close()
        await pool.close()


async def _running(pool: Any, owner: str = "A") -> RunRow:
    async with pool.acquire() as conn:
        return await running_run(conn, "ride out", owner=owner)


def _cut() -> asyncpg.exceptions.ConnectionDoesNotExistError:
    """What asyncpg raises for a statement whose connection the restarting server ended."""
    return asyncpg.exceptions.ConnectionDoesNotExistError(
        "connection was closed in the middle of operation"
    )


def _failing(real: Append, plan: list[str]) -> Append:
    """append_as_lease_holders following `plan`, one step per call: "down" raises before the
    statement runs, "lost" runs it (it commits) and then raises as if the answer was lost;
    past the plan, the real statement."""

    async def append(conn: Any, appends: Any) -> dict[str, bool]:
        step = plan.pop(0) if plan else "ok"
        if step == "down":
            raise _cut()
        held = await real(conn, appends)
        if step == "lost":
            raise _cut()
        return held

    return append


async def _sequences(pool: Any, run_id: str) -> list[int]:
    async with pool.acquire() as conn:
        return [s for s, _ in await event_log.read_after(conn, run_id, 0, 1000)]


def _retries() -> float:
    return float(metrics.WRITE_RETRIES._value.get())


async def test_a_write_the_store_refused_is_retried_and_lands_once(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool, bus, sink = writing
    run = await _running(pool)
    plan = ["down", "down", "down"]
    monkeypatch.setattr(
        event_log, "append_as_lease_holders", _failing(event_log.append_as_lease_holders, plan)
    )
    before = _retries()
    writer = RunWriter(pool, bus, sink, run.id, run.lease_epoch, 1, ride_out_s=30)
    for i in range(5):
        await writer.emit([ev.text_delta("m", f"{i} ")], streamed=2)
    await writer.commit([ev.done("m")], None)
    assert plan == []  # every planned failure was met
    assert _retries() - before == 3
    assert writer.last_sequence == 7
    assert await _sequences(pool, run.id) == list(range(1, 8))  # dense, each once


async def test_a_write_whose_answer_was_lost_is_not_written_again(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt committed but its answer never came: the retry finds the log already
    ending where that attempt leaves it, under this epoch, and goes on from there."""
    pool, bus, sink = writing
    run = await _running(pool)
    plan = ["lost"]
    monkeypatch.setattr(
        event_log, "append_as_lease_holders", _failing(event_log.append_as_lease_holders, plan)
    )
    writer = RunWriter(pool, bus, sink, run.id, run.lease_epoch, 1, ride_out_s=30)
    await writer.commit([ev.text_delta("m", "a "), ev.text_delta("m", "b ")], None)
    assert plan == [] and writer.last_sequence == 3
    await writer.commit([ev.text_delta("m", "c ")], None)  # numbered after the landed batch
    assert writer.last_sequence == 4
    assert await _sequences(pool, run.id) == [1, 2, 3, 4]
    async with pool.acquire() as conn:
        stored = await event_log.read_after(conn, run.id, 1, 10)
    text = [ev.RunEvent.FromString(d).text_delta.delta for _, d in stored]
    assert text == ["a ", "b ", "c "]


async def test_a_run_taken_over_during_the_outage_fences_the_waiting_writer(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool, bus, sink = writing
    run = await _running(pool)
    real = event_log.append_as_lease_holders
    calls = 0

    async def taken_over_while_down(conn: Any, appends: Any) -> dict[str, bool]:
        nonlocal calls
        calls += 1
        if calls == 1:
            # While this writer waits, its lease runs out and another worker takes the run.
            async with pool.acquire() as other:
                await other.execute(
                    "UPDATE run SET lease_expires_at = now() - interval '1 s' WHERE id = $1",
                    run.id,
                )
                ((took, took_over),) = await runs.claim_batch(other, "B", 30, 1)
                assert took.id == run.id and took_over
            raise _cut()
        return await real(conn, appends)

    monkeypatch.setattr(event_log, "append_as_lease_holders", taken_over_while_down)
    writer = RunWriter(pool, bus, sink, run.id, run.lease_epoch, 1, ride_out_s=30)
    with pytest.raises(event_log.Fenced):
        await writer.commit([ev.text_delta("m", "zombie ")], None)
    assert calls == 1  # told by the position check, before another attempt
    assert await _sequences(pool, run.id) == [1]  # nothing of the old lease's batch


async def test_without_a_window_the_outage_reaches_the_run(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TETHER_STORE_RIDE_OUT_S=0: the first failure is the run's (its worker hands it back)."""
    pool, bus, sink = writing
    run = await _running(pool)
    plan = ["down"]
    monkeypatch.setattr(
        event_log, "append_as_lease_holders", _failing(event_log.append_as_lease_holders, plan)
    )
    writer = RunWriter(pool, bus, sink, run.id, run.lease_epoch, 1, ride_out_s=0)
    with pytest.raises(asyncpg.exceptions.ConnectionDoesNotExistError):
        await writer.commit([ev.text_delta("m", "x ")], None)
    assert await _sequences(pool, run.id) == [1]


async def test_a_worker_never_takes_over_a_run_it_still_executes(writing: Any) -> None:
    """An outage longer than the lease leaves it expired while its worker waits to write: that
    worker's claim passes over it (the run goes on where it is); any other claim takes it."""
    pool, _, _ = writing
    run = await _running(pool, owner="A")
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE run SET lease_expires_at = now() - interval '1 s' WHERE id = $1", run.id
        )
        assert await runs.claim_batch(conn, "A", 30, 10, held=[run.id]) == []
        ((took, took_over),) = await runs.claim_batch(conn, "B", 30, 10, held=[])
        assert took.id == run.id and took_over and took.lease_epoch == run.lease_epoch + 1
