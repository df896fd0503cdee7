"""The append-only event log. Appends take the next sequences from the run row in the same
transaction as the state change they announce (invariants 1 and 3), conditional on the writer's
lease epoch or on the run's status (invariant 2)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from google.protobuf.timestamp_pb2 import Timestamp

from tether_runtime.domain.events import RunEvent, kind_of
from tether_runtime.store import outbox
from tether_runtime.store.db import Conn


class Fenced(Exception):
    """This writer lost the run: its lease was taken over, or the run left the expected status."""


class Denied(Exception):
    """A read claim's grant (ReadClaim.action on its scope) is not the run's user's: nothing of
    the append was written, though the lease and position held."""


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


def stamp(
    run_id: str, first: int, events: Sequence[RunEvent], now: Timestamp | None = None
) -> list[tuple[str, int, str, bytes]]:
    """Set run id, sequence and time (now, unless given) on each event and encode it once:
    (run, seq, type, data)."""
    now = _now() if now is None else now
    rows = []
    for i, ev in enumerate(events):
        ev.run_id = run_id
        ev.sequence = first + i
        ev.time.CopyFrom(now)
        rows.append((run_id, first + i, kind_of(ev), ev.SerializeToString()))
    return rows


def _now() -> Timestamp:
    now = Timestamp()
    now.FromNanoseconds(time.time_ns())
    return now


@dataclass(frozen=True)
class ReadClaim:
    """A read-only call inserted straight into `executing` for the appending epoch, as
    interrupts.claim_call(..., "new") does, but inside the fenced append: written only if the
    lease and position held, in the same statement as the events."""

    call_id: str
    tool: str
    args_json: str
    key: str
    action: str | None = None
    """The grant the tool declares (policy.granted's action), checked for the run's user on
    `scope` by the same statement: without it, nothing of the append is written (Denied)."""
    scope: str = ""


@dataclass(frozen=True)
class CallFinish:
    """A call's result stored with its `tool_finished`, as interrupts.finish_call does (only for
    the appending epoch's claim), with the confirmed facts it brings merged into the run's
    conversation, as conversations.merge_facts does."""

    call_id: str
    ok: bool
    summary: str
    result_json: str
    facts_json: str | None = None


@dataclass(frozen=True)
class RunEnd:
    """The run leaves its worker with these events, as runs.finish does (status, lease given
    back, attempts over), with the assistant's answer stored as conversations.add_message
    does. Its checkpoint, if saved, is LeaseAppend.checkpoint (with reset_streamed)."""

    status: str
    answer_id: str | None = None
    answer: str = ""


@dataclass
class LeaseAppend:
    """Events of one run, numbered by the worker that holds its lease (the run's only appender
    while it runs): it expects the log to end at `expected_last`. They are stamped and encoded
    as the statement that writes them is built (`append_as_lease_holders`): an event's time is
    when it was written, not when it was queued behind another statement.

    Besides the events, the same statement may carry the run's own state changes that need no
    transaction of their own (each applied only if the fence held): its checkpoint, a read-only
    call's claim, a call's result, the run's end; and it always enqueues the webhook deliveries
    of the events that leave Tether."""

    run_id: str
    epoch: int
    expected_last: int
    events: Sequence[RunEvent]
    streamed: int
    checkpoint: str | None = None
    """The run's state to save with the events (encoded JSON), or None to leave it."""
    reset_streamed: bool = False
    """With `checkpoint`: a new model step starts, step_streamed goes back to 0."""
    read_claim: ReadClaim | None = None
    """A read-only tool call to claim for this epoch with the events (its `tool_started`)."""
    call_finish: CallFinish | None = None
    end: RunEnd | None = None
    rows: list[tuple[str, int, str, bytes]] = field(default_factory=list)  # set by `stamp`

    def stamp(self, now: Timestamp) -> None:
        self.rows = stamp(self.run_id, self.expected_last + 1, self.events, now)

    @property
    def new_last(self) -> int:
        return self.expected_last + len(self.events)

    @property
    def encoded(self) -> list[bytes]:
        """The events as stored (once written)."""
        return [r[3] for r in self.rows]


# The fenced append is one CTE of ten parts (fence, events, read claim and its grant, call finish,
# facts, answer, webhook outbox), kept as the function run_append (migration 0020_run_append.sql,
# where each part is explained, and 0023 its grant check): its plan is cached per server session
# even where asyncpg's statement cache is off (behind PgBouncer in transaction mode), instead of
# being planned on every call.
_APPEND_AS_LEASE_HOLDERS = (
    "SELECT o_id AS id, o_cancel AS cancel_requested, o_denied AS denied FROM run_append("
    + ", ".join(f"${i}" for i in range(1, 35))
    + ")"
)


class Held(dict[str, bool]):
    """Run id -> cancel_requested, for the runs whose lease and position held and whose append was
    written; `denied`: the runs whose read claim's grant their user does not hold (held, but
    nothing of them written)."""

    denied: frozenset[str] = frozenset()


async def append_as_lease_holders(conn: Conn, appends: Sequence[LeaseAppend]) -> Held:
    """Fence, check the position and insert for any number of runs in ONE statement (one round
    trip, atomic on its own), with each run's state changes and webhook deliveries. Returns run
    id -> cancel_requested for the runs whose lease and position held (`Held.denied` apart); a
    run missing from the result was fenced and nothing of it stored."""
    now = _now()
    for a in appends:
        a.stamp(now)
    claims = [(a.run_id, a.read_claim) for a in appends if a.read_claim is not None]
    finishes = [(a.run_id, a.call_finish) for a in appends if a.call_finish is not None]
    facts = [(run_id, f.facts_json) for run_id, f in finishes if f.facts_json is not None]
    answers = [(a.run_id, a.end) for a in appends if a.end is not None and a.end.answer_id]
    hooks = outbox.Deliveries.of([(a.run_id, a.events) for a in appends])
    rows = await conn.fetch(
        _APPEND_AS_LEASE_HOLDERS,
        [a.run_id for a in appends],
        [a.epoch for a in appends],
        [a.expected_last for a in appends],
        [a.new_last for a in appends],
        [a.streamed for a in appends],
        [r[0] for a in appends for r in a.rows],
        [r[1] for a in appends for r in a.rows],
        [r[2] for a in appends for r in a.rows],
        [r[3] for a in appends for r in a.rows],
        [a.checkpoint for a in appends],
        [a.reset_streamed for a in appends],
        [run_id for run_id, _ in claims],
        [c.call_id for _, c in claims],
        [c.tool for _, c in claims],
        [c.args_json for _, c in claims],
        [c.key for _, c in claims],
        [a.end.status if a.end is not None else None for a in appends],
        [run_id for run_id, _ in finishes],
        [f.call_id for _, f in finishes],
        [f.ok for _, f in finishes],
        [f.summary for _, f in finishes],
        [f.result_json for _, f in finishes],
        [run_id for run_id, _ in facts],
        [f for _, f in facts],
        [run_id for run_id, _ in answers],
        [e.answer_id for _, e in answers],
        [e.answer for _, e in answers],
        *hooks.arrays(),
        [c.action for _, c in claims],
        [c.scope for _, c in claims],
    )
    held = Held((r["id"], bool(r["cancel_requested"])) for r in rows if not r["denied"])
    held.denied = frozenset(r["id"] for r in rows if r["denied"])
    return held


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
    """reserve + insert (+ the webhook outbox); call inside a transaction. Returns (encoded
    events, cancel_requested)."""
    first, cancel = await reserve(
        conn, run_id, len(events), epoch=epoch, statuses=statuses, streamed=streamed
    )
    encoded = await insert(conn, run_id, first, events)
    await outbox.enqueue(conn, run_id, events)  # webhooks commit with what they announce
    return encoded, cancel


async def read_after(conn: Conn, run_id: str, after: int, limit: int) -> list[tuple[int, bytes]]:
    rows = await conn.fetch(
        "SELECT sequence, data FROM run_event WHERE run_id = $1 AND sequence > $2 "
        "ORDER BY sequence LIMIT $3",
        run_id,
        after,
        limit,
    )
    return [(int(r["sequence"]), bytes(r["data"])) for r in rows]


GRAPH_EVENTS = ["graph_update", "graph_values", "custom_data"]


async def graph_events_before(
    conn: Conn, run_id: str, before: int, limit: int
) -> list[tuple[int, RunEvent]]:
    """A graph run's own events (GraphUpdate, GraphValues, CustomData) before sequence `before`,
    newest first, at most `limit` (a worker that continues the graph pages back through the
    steps it may re-run)."""
    rows = await conn.fetch(
        "SELECT sequence, data FROM run_event WHERE run_id = $1 AND sequence < $2 "
        "AND type = ANY($3::text[]) ORDER BY sequence DESC LIMIT $4",
        run_id,
        before,
        GRAPH_EVENTS,
        limit,
    )
    return [(int(r["sequence"]), RunEvent.FromString(r["data"])) for r in rows]


async def streamed_text(conn: Conn, run_id: str, message_id: str) -> str:
    """The text a run streamed under `message_id`, as its browsers saw it (a worker taking over
    a step that a crashed one had half streamed asks a provider to continue from it)."""
    rows = await conn.fetch(
        "SELECT data FROM run_event WHERE run_id = $1 AND type = 'text_delta' ORDER BY sequence",
        run_id,
    )
    out = []
    for row in rows:
        ev = RunEvent.FromString(row["data"])
        if ev.text_delta.message_id == message_id:
            out.append(ev.text_delta.delta)
    return "".join(out)
