"""One process-wide path for the event-only writes of every executing run: whatever all runs
queued while the previous round trip was in flight goes to Postgres in ONE statement (each run
fenced by its own lease epoch and position) and to Redis in ONE pipelined round trip. Per-call
costs dominate in Python (PERFORMANCE.md), so many runs' events share each call."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tether_runtime import events as ev
from tether_runtime.bus import EventBus
from tether_runtime.store import event_log
from tether_runtime.store.db import Pool

log = logging.getLogger(__name__)

_APPEND_MANY = """
WITH v AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
        AS v(id, epoch, expected, new_last, streamed)
), fence AS (
    UPDATE run r SET last_sequence = v.new_last, step_streamed = r.step_streamed + v.streamed,
           updated_at = now()
    FROM v
    WHERE r.id = v.id AND r.lease_epoch = v.epoch AND r.status = 'running'
      AND r.last_sequence = v.expected
    RETURNING r.id, r.cancel_requested
), ins AS (
    INSERT INTO run_event (run_id, sequence, type, data)
    SELECT e.run_id, e.s, e.t, e.d
    FROM unnest($6::text[], $7::bigint[], $8::text[], $9::bytea[]) AS e(run_id, s, t, d)
    JOIN fence ON fence.id = e.run_id
    RETURNING 1
)
SELECT id, cancel_requested FROM fence
"""


@dataclass
class _Append:
    run_id: str
    epoch: int
    expected_last: int
    rows: list[tuple[str, int, str, bytes]]
    streamed: int
    done: asyncio.Future[bool]


class EventSink:
    def __init__(self, pool: Pool, bus: EventBus) -> None:
        self.pool = pool
        self.bus = bus
        self._queue: list[_Append] = []
        self._task: asyncio.Task[None] | None = None

    async def append(
        self,
        run_id: str,
        epoch: int,
        expected_last: int,
        events: list[ev.RunEvent],
        streamed: int,
    ) -> tuple[list[bytes], bool]:
        """Commit and announce these events of one run; returns (encoded, cancel_requested).
        Raises Fenced when the run's lease or position is not the caller's."""
        rows = event_log.stamp(run_id, expected_last + 1, events)
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append(_Append(run_id, epoch, expected_last, rows, streamed, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="event-sink")
        cancel = await done
        return [r[3] for r in rows], cancel

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                async with self.pool.acquire() as conn:
                    passed = await conn.fetch(
                        _APPEND_MANY,
                        [a.run_id for a in batch],
                        [a.epoch for a in batch],
                        [a.expected_last for a in batch],
                        [a.expected_last + len(a.rows) for a in batch],
                        [a.streamed for a in batch],
                        [r[0] for a in batch for r in a.rows],
                        [r[1] for a in batch for r in a.rows],
                        [r[2] for a in batch for r in a.rows],
                        [r[3] for a in batch for r in a.rows],
                    )
            except Exception as err:  # the store failed: every waiting run sees it
                for a in batch:
                    if not a.done.done():
                        a.done.set_exception(err)
                continue
            cancels = {r["id"]: bool(r["cancel_requested"]) for r in passed}
            await self.bus.publish_many(
                [(a.run_id, [r[3] for r in a.rows]) for a in batch if a.run_id in cancels]
            )
            for a in batch:
                if a.done.done():
                    continue
                if a.run_id in cancels:
                    a.done.set_result(cancels[a.run_id])
                else:
                    a.done.set_exception(event_log.Fenced(a.run_id))
