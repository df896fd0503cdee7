"""Runs whose ids were minted at a chosen time (days ago, or days ahead), with an event log, written
straight to the store: what retention tests need, since run_event is partitioned by the time in a
run's id (migration 0019) and a real run is always minted now."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.store import event_log, run_admission


async def run_minted_at(
    conn: Any,
    at: dt.datetime | None,
    conversation_id: str,
    *,
    user: str = "alice",
    deltas: int = 3,
    status: str = "completed",
) -> tuple[str, int]:
    """A run with an id of time `at` (None: minted now, as any run) and `deltas + 2` events (run_started, text deltas, done),
    left in `status` in the same transaction (no worker ever sees it queued). Returns (run id,
    last sequence)."""
    run_id = new_id("run")
    if at is not None:
        floor = await conn.fetchval("SELECT tether_id_floor('run', $1)", at)
        run_id = str(floor) + run_id[-16:]
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conversation_id)])
    more = [ev.text_delta("msg_dated", f"d{i} ") for i in range(deltas)] + [ev.done("msg_dated")]
    async with conn.transaction():
        run = await run_admission.start_parallel(
            conn,
            run_id,
            conversation_id,
            user,
            new_id("msg"),
            "dated",
            "opspilot",
            {},
            (kind, data),
            {"started": True},
        )
        assert run is not None
        await event_log.insert(conn, run_id, 2, more)
        await conn.execute(
            "UPDATE run SET status = $2, last_sequence = $3 WHERE id = $1",
            run_id,
            status,
            len(more) + 1,
        )
    return run_id, len(more) + 1


async def partition_of(conn: Any, run_id: str) -> str | None:
    """The partition holding the run's events (None: it has none)."""
    value = await conn.fetchval(
        "SELECT tableoid::regclass::text FROM run_event WHERE run_id = $1 LIMIT 1", run_id
    )
    return None if value is None else str(value)
