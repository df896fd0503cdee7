"""The append-only event log. Appends take the next sequences from the run row in the same
transaction as the state change they announce (invariants 1 and 3), conditional on the writer's
lease epoch or on the run's status (invariant 2)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from tether_runtime.events import RunEvent, kind_of
from tether_runtime.store.db import Conn


class Fenced(Exception):
    """This writer lost the run: its lease was taken over, or the run left the expected status."""


async def reserve(
    conn: Conn,
    run_id: str,
    count: int,
    *,
    epoch: int | None = None,
    statuses: Sequence[str] | None = None,
    streamed: int = 0,
) -> tuple[int, bool]:
    """Take `count` sequences for this run; returns (first sequence, cancel_requested).
    Locks the run row, so concurrent appenders serialize and sequences stay dense."""
    row = await conn.fetchrow(
        """
        UPDATE run SET last_sequence = last_sequence + $2, step_streamed = step_streamed + $5,
               updated_at = now()
        WHERE id = $1
          AND ($3::bigint IS NULL OR (lease_epoch = $3 AND status = 'running'))
          AND ($4::text[] IS NULL OR status = ANY($4::text[]))
        RETURNING last_sequence, cancel_requested
        """,
        run_id,
        count,
        epoch,
        list(statuses) if statuses is not None else None,
        streamed,
    )
    if row is None:
        raise Fenced(run_id)
    return int(row["last_sequence"]) - count + 1, bool(row["cancel_requested"])


def stamp(run_id: str, first: int, events: Sequence[RunEvent]) -> list[tuple[str, int, str, bytes]]:
    """Set run id, sequence and time on each event and encode it once: (run, seq, type, data)."""
    now = Timestamp()
    now.FromNanoseconds(time.time_ns())
    rows = []
    for i, ev in enumerate(events):
        ev.run_id = run_id
        ev.sequence = first + i
        ev.time.CopyFrom(now)
        rows.append((run_id, first + i, kind_of(ev), ev.SerializeToString()))
    return rows


_APPEND_AS_LEASE_HOLDER = """
WITH fence AS (
    UPDATE run SET last_sequence = $3, step_streamed = step_streamed + $4, updated_at = now()
    WHERE id = $1 AND lease_epoch = $2 AND status = 'running' AND last_sequence = $5
    RETURNING cancel_requested
), ins AS (
    INSERT INTO run_event (run_id, sequence, type, data)
    SELECT $1, u.s, u.t, u.d FROM fence, unnest($6::bigint[], $7::text[], $8::bytea[]) AS u(s, t, d)
    RETURNING 1
)
SELECT (SELECT cancel_requested FROM fence) AS cancel
"""


async def append_as_lease_holder(
    conn: Conn,
    run_id: str,
    epoch: int,
    expected_last: int,
    events: Sequence[RunEvent],
    streamed: int,
) -> tuple[list[bytes], bool]:
    """The worker's append: while it holds the lease it is the run's only writer, so it numbers
    the events itself and fences, checks the position and inserts in ONE statement (one round
    trip, atomic on its own). Raises Fenced if the lease or the position is not what it thinks."""
    rows = stamp(run_id, expected_last + 1, events)
    cancel = await conn.fetchval(
        _APPEND_AS_LEASE_HOLDER,
        run_id,
        epoch,
        expected_last + len(rows),
        streamed,
        expected_last,
        [r[1] for r in rows],
        [r[2] for r in rows],
        [r[3] for r in rows],
    )
    if cancel is None:
        raise Fenced(run_id)
    return [r[3] for r in rows], bool(cancel)


async def insert(conn: Conn, run_id: str, first: int, events: Sequence[RunEvent]) -> list[bytes]:
    """Stamp run id, sequence and time on each event, store it, and return the encoded events."""
    rows = stamp(run_id, first, events)
    encoded = [r[3] for r in rows]
    if len(rows) == 1:
        await conn.execute(
            "INSERT INTO run_event (run_id, sequence, type, data) VALUES ($1, $2, $3, $4)", *rows[0]
        )
    else:
        await conn.copy_records_to_table(
            "run_event", records=rows, columns=["run_id", "sequence", "type", "data"]
        )
    return encoded


async def append(
    conn: Conn,
    run_id: str,
    events: Sequence[RunEvent],
    *,
    epoch: int | None = None,
    statuses: Sequence[str] | None = None,
    streamed: int = 0,
) -> tuple[list[bytes], bool]:
    """reserve + insert; call inside a transaction. Returns (encoded events, cancel_requested)."""
    first, cancel = await reserve(
        conn, run_id, len(events), epoch=epoch, statuses=statuses, streamed=streamed
    )
    return await insert(conn, run_id, first, events), cancel


async def read_after(conn: Conn, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
    rows = await conn.fetch(
        "SELECT sequence, data FROM run_event WHERE run_id = $1 AND sequence > $2 "
        "ORDER BY sequence LIMIT $3",
        run_id,
        after,
        limit,
    )
    return [(int(r["sequence"]), bytes(r["data"])) for r in rows]
