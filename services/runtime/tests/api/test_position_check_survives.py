"""The streams' positioning check (event_stream.EventStream._check_positions) is what finds a run
whose last events' publishes were lost (a runtime cut off from Redis: each publish times out and is
dropped). It is one task per process: an error it did not expect (here a lock timeout, a PostgresError that
is not a lost store) must cost one round of checks, not end the task, which nothing restarts until
another stream opens: every open stream then waits, silently, for its run's last events."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from tether_common.auth import Principal
from tether_common.run_bus import EventBus
from tether_runtime.api.event_stream import EventStream
from tether_runtime.domain import events as ev
from tether_runtime.store import event_log, runs
from tether_testkit.running_runs import running_run


async def _running_run(pool: Any) -> tuple[str, int]:
    async with pool.acquire() as conn:
        run = await running_run(conn, "quiet")
    return run.id, run.lease_epoch


async def test_a_failed_check_does_not_end_the_checks(
    pool: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, epoch = await _running_run(pool)
    real = runs.last_sequences
    failures = 0

    async def fails_once(conn: Any, run_ids: set[str]) -> dict[str, int]:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise asyncpg.exceptions.LockNotAvailableError(
                "canceling statement due to lock timeout"
            )
        return await real(conn, run_ids)

    monkeypatch.setattr(runs, "last_sequences", fails_once)
    bus = EventBus(redis_url)
    await bus.start()
    stream = EventStream(pool, bus, quiet_check_s=0.2)
    try:
        view = await stream.open(Principal("alice"), run_id, 0)
        got: list[int] = []

        async def follow() -> None:
            async for item in stream.follow(view, 0):
                data = item if isinstance(item, bytes) else ev.batch_from_encoded(item)  # type: ignore[arg-type]
                got.extend(e.sequence for e in ev.split_batch(data))

        following = asyncio.create_task(follow())
        # The stream sent the replay and waits, quiet; the first check fails.
        async with asyncio.timeout(20):
            while not failures:
                await asyncio.sleep(0.05)
        assert got == [1]
        # The run's last events commit and their publish is lost (none is made).
        async with pool.acquire() as conn:
            last = [ev.text_delta("m", "bye"), ev.done("m")]
            held = await event_log.append_as_lease_holders(
                conn, [event_log.LeaseAppend(run_id, epoch, 1, last, 0)]
            )
        assert run_id in held
        # A later check finds them: the stream ends with `done`, each event once.
        await asyncio.wait_for(following, 20)
        assert got == [1, 2, 3]
    finally:
        await bus.close()
