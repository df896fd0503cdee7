"""One process-wide path for the event-only writes of every executing run: whatever all runs
queued while the previous round trip was in flight goes to Postgres in ONE statement (each run
fenced by its own lease epoch and position) and to Redis in ONE pipelined round trip. Per-call
costs dominate in Python (PERFORMANCE.md), so many runs' events share each call."""

from __future__ import annotations

import asyncio

from tether_runtime.bus import EventBus
from tether_runtime.store import event_log
from tether_runtime.store.db import Pool
from tether_runtime.store.event_log import LeaseAppend


class EventSink:
    def __init__(self, pool: Pool, bus: EventBus) -> None:
        self.pool = pool
        self.bus = bus
        self._queue: list[tuple[LeaseAppend, asyncio.Future[bool]]] = []
        self._task: asyncio.Task[None] | None = None

    async def append(self, append: LeaseAppend) -> bool:
        """Commit and announce one run's events; returns cancel_requested. Raises Fenced when the
        run's lease or position is not the caller's."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((append, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="event-sink")
        return await done

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                async with self.pool.acquire() as conn:
                    held = await event_log.append_as_lease_holders(conn, [a for a, _ in batch])
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
                else:
                    done.set_exception(event_log.Fenced(a.run_id))
