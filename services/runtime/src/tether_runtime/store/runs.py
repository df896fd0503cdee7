"""Runs: creation, the fenced lease (claim, renew, release) and reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tether_runtime.domain.records import ConversationRow, MessageRow, RunRow
from tether_runtime.store.conversations import TURNS_PAGE
from tether_runtime.store.db import Conn

WAKE_CHANNEL = "tether_wake"
HELD_CHANNEL = "tether_held"
"""A held question's run id: answered, expired or cancelled (wake_held)."""


async def create(
    conn: Conn,
    run_id: str,
    conversation_id: str,
    user_id: str,
    user_message_id: str,
    agent: str,
    trace_context: dict[str, Any],
) -> RunRow:
    row = await conn.fetchrow(
        "INSERT INTO run (id, conversation_id, user_id, user_message_id, agent, status, "
        "trace_context) VALUES ($1, $2, $3, $4, $5, 'queued', $6) RETURNING *",
        run_id,
        conversation_id,
        user_id,
        user_message_id,
        agent,
        trace_context,
    )
    assert row is not None
    await wake(conn)
    return RunRow.of(row)


async def wake(conn: Conn) -> None:
    """Tell idle workers there is work; delivered only if the transaction commits."""
    await conn.execute("SELECT pg_notify($1, '')", WAKE_CHANNEL)


async def wake_held(conn: Conn, run_id: str) -> None:
    """Tell the worker waiting in the run's call that its question was answered, expired or
    cancelled (engine/held_wakes.py); delivered only if the transaction commits."""
    await conn.execute("SELECT pg_notify($1, $2)", HELD_CHANNEL, run_id)


async def get(conn: Conn, run_id: str) -> RunRow | None:
    row = await conn.fetchrow("SELECT * FROM run WHERE id = $1", run_id)
    return RunRow.of(row) if row else None


# A listing's columns: the checkpoint reduced to the usage figures a RunView reads, so a page of
# runs does not detoast every run's whole transcript.
_LISTED = (
    "id, conversation_id, user_id, user_message_id, agent, status, lease_owner, lease_epoch, "
    "cancel_requested, cancel_reason, last_sequence, step_streamed, trace_context, attempts, "
    "created_at, updated_at, jsonb_build_object('input_tokens', input_tokens, 'output_tokens', "
    "output_tokens, 'steps', checkpoint->'steps') AS checkpoint"
)


def listing_query(
    user_id: str | None,
    limit: int,
    before_id: str | None,
    *,
    conversation_id: str | None = None,
    status: str | None = None,
    agent: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[str, list[Any]]:
    """A page's statement and arguments (run_pages.py). Only the filters given are in it (no `$n IS
    NULL OR ...`), so a cached generic plan still walks the index that fits (migrations 0007 and
    0012)."""
    where: list[str] = []
    args: list[Any] = []
    for clause, value in (
        ("user_id = ${}", user_id),
        ("id < ${}", before_id),
        ("conversation_id = ${}", conversation_id),
        ("status = ${}", status),
        ("agent = ${}", agent),
        ("created_at >= ${}", since),
        ("created_at < ${}", until),
    ):
        if value is not None:
            args.append(value)
            where.append(clause.format(len(args)))
    args.append(limit)
    condition = " AND ".join(where) or "true"
    return f"SELECT {_LISTED} FROM run WHERE {condition} ORDER BY id DESC LIMIT ${len(args)}", args


async def lock(conn: Conn, run_id: str) -> RunRow | None:
    """The first lock of every path that moves a run and its interrupt (resume, cancel, expiry,
    raising or resolving an interrupt): the run row, then the interrupt, in one transaction. One
    order for all of them, so no two can deadlock. FOR NO KEY UPDATE is the lock `UPDATE run`
    takes anyway (no key column changes): taken first, it adds no conflict the path did not
    already have, and lets readers and key-share lockers through. A lease holder's transaction
    already holds it (its fenced append updated the row first); taking it again is free."""
    row = await conn.fetchrow("SELECT * FROM run WHERE id = $1 FOR NO KEY UPDATE", run_id)
    return RunRow.of(row) if row else None


async def requeue(conn: Conn, run_id: str, trace_context: dict[str, str] | None = None) -> None:
    """A decided interrupt's continuation: back in the queue for any worker, carrying the
    decision's trace context (when given) through the queue."""
    await conn.execute(
        "UPDATE run SET status = 'queued', queued_at = now(), lease_owner = NULL, "
        "lease_expires_at = NULL, trace_context = coalesce($2, trace_context), updated_at = now() "
        "WHERE id = $1",
        run_id,
        trace_context or None,
    )
    await wake(conn)


async def hold(conn: Conn, run_id: str, epoch: int) -> None:
    """A tool in progress asks a person (an MCP server's elicitation): the run is `interrupted`
    while its worker keeps the lease (renewed by its heartbeat) and waits in the call. Nobody
    claims an interrupted run; the answer gives it back to the same lease (`unhold`)."""
    await conn.execute(
        "UPDATE run SET status = 'interrupted', updated_at = now() "
        "WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
        run_id,
        epoch,
    )


async def unhold(conn: Conn, run_id: str, trace_context: dict[str, str] | None = None) -> None:
    """A held question answered (or expired): the run goes back to the worker that waits in the
    call, whose lease still runs; a lease that ran out (the worker died) queues the run for any
    worker, which finds the call in progress and follows the rules (a read called again, a
    write called again with its key if idempotent, else outcome_unknown)."""
    moved = await conn.execute(
        "UPDATE run SET status = 'running', updated_at = now() "
        "WHERE id = $1 AND status = 'interrupted' AND lease_owner IS NOT NULL "
        "AND lease_expires_at > now()",
        run_id,
    )
    if moved.endswith(" 1"):
        await wake_held(conn, run_id)
    else:
        await requeue(conn, run_id, trace_context)


async def request_cancel(conn: Conn, run_id: str, reason: str) -> None:
    """A running run's worker sees the flag at its next write or heartbeat and ends the run."""
    await conn.execute(
        "UPDATE run SET cancel_requested = true, cancel_reason = $2, updated_at = now() "
        "WHERE id = $1",
        run_id,
        reason,
    )


async def mark_cancelled(conn: Conn, run_id: str, reason: str) -> None:
    """A run no worker holds (queued or interrupted) ends here and now."""
    await conn.execute(
        "UPDATE run SET status = 'cancelled', cancel_requested = true, cancel_reason = $2, "
        "lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE id = $1",
        run_id,
        reason,
    )


# The wait, past its lease, before a run whose worker died (or lost the lease) may be claimed
# again, from the attempts it has had (a column or a parameter): none after the first, whose lease
# TTL already passed (one crash is the common case, and the run is not at fault), then the base,
# doubling with each attempt, at most the cap. The exponent is bounded so power() never overflows.
_BACKOFF = (
    "CASE WHEN {attempts} < 2 THEN 0 ELSE least($4 * power(2, least({attempts} - 2, 16)), $5) END"
)

# The claimed run's conversation comes back with it (its columns prefixed `conv_`): the executor
# needs its facts and summary for its first step, and reading it here saves a round trip per run.
# The conversation is joined outside `next`, so only the run rows are locked.
_CONV_COLUMNS = ", ".join(
    f"c.{col} AS conv_{col}"
    for col in (
        "id",
        "user_id",
        "title",
        "facts",
        "summary",
        "summary_through",
        "version",
        "created_at",
        "updated_at",
    )
)

# For a run whose starting context is still to be built (its checkpoint not `started`: StartRun
# stored only its answer's id, or nothing), the claim also reads the run's own message and the
# newest TURNS_PAGE user/assistant turns before it, newest first, as arrays (no JSON to parse),
# the rows conversations.get_with_turns reads: the worker builds the context from them
# (context.starting_context) without a read of its own.
_TURN_COLUMNS = ("id", "run_id", "role", "content", "tool_call_id", "created_at")
_STARTING_TURNS = f"""
LEFT JOIN LATERAL (
    SELECT {", ".join(f"array_agg(m.{col} ORDER BY m.id DESC) AS turn_{col}" for col in _TURN_COLUMNS)}
    FROM (SELECT * FROM message
          WHERE NOT next.started AND conversation_id = next.conversation_id
            AND role IN ('user', 'assistant') AND id <= next.user_message_id
          ORDER BY id DESC LIMIT {TURNS_PAGE + 1}) m
) t ON true"""

_CLAIM = f"""
WITH next AS (
    SELECT id, conversation_id, status AS was, queued_at AS place, user_message_id,
           checkpoint ? 'started' AS started
    FROM run
    WHERE (status = 'queued'
           OR (status = 'running'
               AND lease_expires_at + make_interval(secs => {_BACKOFF.format(attempts="attempts")})
                   < now()))
      AND id <> ALL($6::text[])
    ORDER BY queued_at
    FOR UPDATE SKIP LOCKED
    LIMIT $3
)
UPDATE run SET status = 'running', lease_owner = $1, lease_epoch = lease_epoch + 1,
       attempts = run.attempts + 1,
       lease_expires_at = now() + make_interval(secs => $2),
       queued_at = now() + make_interval(
           secs => $2 + {_BACKOFF.format(attempts="(run.attempts + 1)")}),
       updated_at = now()
FROM next LEFT JOIN conversation c ON c.id = next.conversation_id{_STARTING_TURNS}
WHERE run.id = next.id
RETURNING run.*, next.was = 'running' AS took_over, next.place, {_CONV_COLUMNS},
    {", ".join(f"t.turn_{col}" for col in _TURN_COLUMNS)}
"""

MAX_BACKOFF_S = 60.0


async def claim_batch(
    conn: Conn,
    owner: str,
    ttl_s: float,
    limit: int,
    *,
    backoff_s: float = 0.0,
    held: Sequence[str] = (),
) -> list[tuple[RunRow, bool]]:
    """Take up to `limit` claimable runs in their place in the queue, in one statement: queued
    runs, and runs whose worker's lease ran out, after a backoff from their second attempt on
    (`backoff_s`, doubling with each attempt, at most MAX_BACKOFF_S; 0: none). Each claim bumps
    the run's epoch and its `attempts` (the caller decides what a run with too many does:
    poison.py).

    A claim moves the run's place (`queued_at`) to when it would be claimable again if its
    worker died at once, so a run taken over after a crash lines up behind the runs queued before
    then, instead of at the head of the queue, and the index scan of the claimable runs meets
    the queued ones before the healthy running ones. Returns each run and whether this claim took
    it over from a worker whose lease expired.

    `held`: runs the caller is executing itself; never taken over from itself. A store outage
    longer than the lease lets a run's lease run out while its worker waits to write: once the
    store is back that worker goes on (its writes are fenced by the epoch), and a claim by its own
    claim loop would only fence it and re-run the step."""
    claimed = await claim_with_conversations(
        conn, owner, ttl_s, limit, backoff_s=backoff_s, held=held
    )
    return [(c.run, c.took_over) for c in claimed]


@dataclass(frozen=True)
class Claimed:
    """A claimed run, whether the claim took it over, and its conversation as of the claim."""

    run: RunRow
    took_over: bool
    conversation: ConversationRow | None
    turns: list[MessageRow] | None = None
    """For a run whose starting context is still to be built: its own message and the turns
    before it, newest first (at most TURNS_PAGE + 1). None for a run that has started."""


def _turns(row: Any) -> list[MessageRow] | None:
    ids = row["turn_id"]
    if ids is None:
        return None
    conversation_id = row["conversation_id"]
    return [
        MessageRow(id_, conversation_id, run_id, role, content, tool_call_id, created_at)
        for id_, run_id, role, content, tool_call_id, created_at in zip(
            ids,
            row["turn_run_id"],
            row["turn_role"],
            row["turn_content"],
            row["turn_tool_call_id"],
            row["turn_created_at"],
            strict=True,
        )
    ]


async def claim_with_conversations(
    conn: Conn,
    owner: str,
    ttl_s: float,
    limit: int,
    *,
    backoff_s: float = 0.0,
    held: Sequence[str] = (),
) -> list[Claimed]:
    """`claim_batch`, each run with its conversation read by the same statement (the worker's
    claim: the executor starts from it instead of reading it again)."""
    rows = await conn.fetch(_CLAIM, owner, ttl_s, limit, backoff_s, MAX_BACKOFF_S, list(held))
    rows = sorted(rows, key=lambda row: row["place"])  # UPDATE ... RETURNING has no order
    return [
        Claimed(
            RunRow.of(row),
            bool(row["took_over"]),
            ConversationRow.of(row, "conv_") if row["conv_id"] is not None else None,
            _turns(row),
        )
        for row in rows
    ]


async def claim_next(
    conn: Conn, owner: str, ttl_s: float, *, backoff_s: float = 0.0
) -> tuple[RunRow, bool] | None:
    """Take one queued run, or one whose worker's lease ran out (see `claim_batch`)."""
    claimed = await claim_batch(conn, owner, ttl_s, 1, backoff_s=backoff_s)
    return claimed[0] if claimed else None


async def claim(conn: Conn, owner: str, ttl_s: float, *, backoff_s: float = 0.0) -> RunRow | None:
    claimed = await claim_next(conn, owner, ttl_s, backoff_s=backoff_s)
    return claimed[0] if claimed else None


@dataclass(frozen=True)
class Position:
    epoch: int
    status: str
    last_sequence: int
    cancel_requested: bool


async def position(conn: Conn, run_id: str) -> Position | None:
    """Where the run's lease and log stand (a writer checking whether its lost attempt landed)."""
    row = await conn.fetchrow(
        "SELECT lease_epoch, status, last_sequence, cancel_requested FROM run WHERE id = $1",
        run_id,
    )
    if row is None:
        return None
    return Position(
        int(row["lease_epoch"]),
        str(row["status"]),
        int(row["last_sequence"]),
        bool(row["cancel_requested"]),
    )


async def renew(conn: Conn, run_id: str, epoch: int, ttl_s: float) -> bool | None:
    """Extend the lease (of a run held by a question its tool asks too: `hold`); None if it was
    not extended (lost, or the run ended), else whether a cancel was requested."""
    kept, _ = await renew_many(conn, [(run_id, epoch)], ttl_s)
    return kept.get(run_id)


async def renew_many(
    conn: Conn, leases: Sequence[tuple[str, int]], ttl_s: float
) -> tuple[dict[str, bool], set[str]]:
    """`renew` for every (run id, epoch) a worker holds, in one statement. Returns the runs whose
    lease was extended, each with whether a cancel was requested, and the runs whose lease was
    lost (another claim moved the epoch on). A run in neither ended its lease itself between the
    worker's look and the statement (it finished, or paused at a card): not a loss."""
    rows = await conn.fetch(
        """
        WITH held AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS h(id, epoch)),
        renewed AS (
            UPDATE run SET lease_expires_at = now() + make_interval(secs => $3)
            FROM held
            WHERE run.id = held.id AND run.lease_epoch = held.epoch AND (run.status = 'running'
                  OR (run.status = 'interrupted' AND run.lease_owner IS NOT NULL))
            RETURNING run.id, run.cancel_requested
        )
        SELECT held.id, renewed.cancel_requested, renewed.id IS NOT NULL AS kept,
               run.lease_epoch IS DISTINCT FROM held.epoch AS lost
        FROM held LEFT JOIN renewed ON renewed.id = held.id LEFT JOIN run ON run.id = held.id
        """,
        [run_id for run_id, _ in leases],
        [epoch for _, epoch in leases],
        ttl_s,
    )
    kept = {r["id"]: bool(r["cancel_requested"]) for r in rows if r["kept"]}
    return kept, {r["id"] for r in rows if not r["kept"] and r["lost"]}


async def release(conn: Conn, run_id: str, epoch: int) -> bool:
    """Graceful shutdown: give the run back to the queue for another worker, and give back the
    attempt its claim counted: a worker that stopped in order says nothing about the run."""
    result = await conn.execute(
        "UPDATE run SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL, "
        "attempts = greatest(attempts - 1, 0), queued_at = now(), updated_at = now() "
        "WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
        run_id,
        epoch,
    )
    if result.endswith(" 1"):
        await wake(conn)
        return True
    return False


# The run's token columns follow the checkpoint being saved (alias `c`, column `j`).
_USAGE_FROM_C = (
    "input_tokens = coalesce((c.j ->> 'input_tokens')::bigint, 0), "
    "output_tokens = coalesce((c.j ->> 'output_tokens')::bigint, 0)"
)


async def save_checkpoint(
    conn: Conn,
    run_id: str,
    epoch: int,
    checkpoint: dict[str, Any] | str,
    *,
    reset_streamed: bool,
) -> None:
    """`checkpoint`: the state, or its JSON already encoded (the executor's snapshot), so it is
    encoded once."""
    encoded = checkpoint if isinstance(checkpoint, str) else json.dumps(checkpoint)
    await conn.execute(
        "UPDATE run SET checkpoint = c.j, step_streamed = CASE WHEN $4 THEN 0 "
        f"ELSE step_streamed END, {_USAGE_FROM_C}, updated_at = now() "
        "FROM (SELECT $3::text::jsonb AS j) c WHERE id = $1 AND lease_epoch = $2",
        run_id,
        epoch,
        encoded,
        reset_streamed,
    )


async def finish(
    conn: Conn, run_id: str, epoch: int, status: str, checkpoint: str | None = None
) -> None:
    """Leave the worker's hands: interrupted, completed, failed or cancelled; with `checkpoint`
    (encoded JSON) the final state is saved by the same statement (and step_streamed reset).
    The run's attempts start over: a run that paused or ended is not a poison run."""
    await conn.execute(
        "UPDATE run SET status = $3, lease_owner = NULL, lease_expires_at = NULL, attempts = 0, "
        "checkpoint = coalesce(c.j, checkpoint), "
        "step_streamed = CASE WHEN c.j IS NULL THEN step_streamed ELSE 0 END, "
        "input_tokens = coalesce((c.j ->> 'input_tokens')::bigint, input_tokens), "
        "output_tokens = coalesce((c.j ->> 'output_tokens')::bigint, output_tokens), "
        "updated_at = now() FROM (SELECT $4::text::jsonb AS j) c "
        "WHERE id = $1 AND lease_epoch = $2",
        run_id,
        epoch,
        status,
        checkpoint,
    )


async def queue_depth(conn: Conn) -> tuple[int, float]:
    row = await conn.fetchrow(
        "SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(queued_at)), 0) AS age "
        "FROM run WHERE status = 'queued'"
    )
    assert row is not None
    return int(row["n"]), float(row["age"])


async def last_sequences(
    conn: Conn, run_ids: set[str], *, user_id: str | None = None
) -> dict[str, int]:
    """Each run's last sequence, in one query (the streams' positioning check); with `user_id`,
    only that user's runs."""
    rows = await conn.fetch(
        "SELECT id, last_sequence FROM run WHERE id = ANY($1::text[])"
        " AND ($2::text IS NULL OR user_id = $2)",
        list(run_ids),
        user_id,
    )
    return {r["id"]: int(r["last_sequence"]) for r in rows}


async def cancel_reason(conn: Conn, run_id: str) -> str:
    return str(await conn.fetchval("SELECT cancel_reason FROM run WHERE id = $1", run_id) or "")
