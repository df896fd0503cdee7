"""One process-wide path for the event-only writes of every executing run: what all runs queued
while the previous round trip was in flight goes to Postgres in ONE statement (each run fenced by
its own lease epoch and position) and to Redis in ONE pipelined round trip. Per-call costs
dominate in Python (PERFORMANCE.md), so many runs' events share each call.

A statement takes whole appends, oldest first, up to MAX_STATEMENT_EVENTS events; the rest wait for
the next. Unbounded, a burst of 200 runs made statements of 4,000-13,000 rows that took 50-110 ms,
and each of their events reached its stream only after the whole statement: bounded at 500, the
fan-out's commit-to-arrival p50 went from 66-77 to 11-14 ms and its p99 from 96-137 to 49-63 ms,
at the same rate (bench/README.md)."""

from __future__ import annotations

import asyncio
from functools import partial

from tether_common.run_bus import EventBus

from tether_runtime.store import db, event_log
from tether_runtime.store.db import Pool
from tether_runtime.store.event_log import LeaseAppend

MAX_STATEMENT_EVENTS = 500


class EventSink:
    def __init__(self, pool: Pool, bus: EventBus) -> None:
        self.pool = pool
        self.bus = bus
        self._queue: list[tuple[LeaseAppend, asyncio.Future[bool]]] = []
        self._task: asyncio.Task[None] | None = None

    async def append(self, append: LeaseAppend) -> bool:
        """Commit and announce one run's events; returns cancel_requested. Raises Fenced when the
        run's lease or position is not the caller's, Denied when its read claim's grant is not
        its user's (nothing written)."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((append, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="event-sink")
        return await done

    async def _drain(self) -> None:
        while self._queue:
            taken = _appends_to_take(self._queue, MAX_STATEMENT_EVENTS)
            batch, self._queue = self._queue[:taken], self._queue[taken:]
            appends = [a for a, _ in batch]
            try:
                # Runs of one conversation on two pods may update its row (their tools' facts)
                # in statements that lock rows in opposite orders: a deadlock aborts one, which
                # then runs again (it was atomic: nothing of it stayed).
                held = await db.retrying(
                    self.pool,
                    partial(event_log.append_as_lease_holders, appends=appends),
                    transaction=False,
                )
            except Exception as err:  # the store failed: every waiting run sees it
                for _, done in batch:
                    if not done.done():
                        done.set_exception(err)
                continue
            # Announce after commit, in one round trip; each run's batches stay in order because
            # its writer waits for this one before sending the next.
            await self.bus.publish_many(
                [(a.run_id, a.encoded) for a, _ in batch if a.run_id in held]
            )
            for a, done in batch:
                if done.done():
                    continue
                if a.run_id in held:
                    done.set_result(held[a.run_id])
                elif a.run_id in held.denied:
                    done.set_exception(event_log.Denied(a.run_id))
                else:
                    done.set_exception(event_log.Fenced(a.run_id))


def _appends_to_take(queue: list[tuple[LeaseAppend, asyncio.Future[bool]]], limit: int) -> int:
    """How many queued appends the next statement takes: whole ones, in order, until they hold
    `limit` events or more (so at least one, however large)."""
    events = 0
    for i, (append, _) in enumerate(queue):
        events += len(append.events)
        if events >= limit:
            return i + 1
    return len(queue)
