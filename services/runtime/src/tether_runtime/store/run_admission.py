"""StartRun under the agent's `concurrent_runs` policy (issue 18): whether the conversation has
an active run decides if the new run is refused, stored `waiting` behind it, or queued.

Exact under concurrent starts in one conversation: the conversation row is locked first (FOR NO
KEY UPDATE, the lock any UPDATE of it takes; the FK checks of inserted messages and runs take
KEY SHARE, which it does not block), and only then, in a statement of its own and so with a
snapshot taken after the lock, are the active runs read and the run inserted. Both happen inside
one plpgsql function (migration 0018), so a start costs one round trip. Two starts in one
conversation take turns; starts in different conversations never wait for each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether_proto import wire

from tether_runtime.domain.records import RunRow
from tether_runtime.store.db import Conn
from tether_runtime.store.runs import WAKE_CHANNEL

# Every status but the terminal ones (migration 0018 spells them out in SQL).
ACTIVE_STATUSES = tuple(s for s in wire.RUN_STATUS.names if s not in wire.TERMINAL_RUN_STATUSES)
# No policy at all: the run is queued beside any active one (store tests and tools that seed
# runs; never an agent's `concurrent_runs`).
PARALLEL = "parallel"

# The conversation lock, the active runs read after it, and the inserts (the user's message, the
# run with its starting state, its first event, sequence 1) and the workers' wake-up, in one
# call (migration 0018): with active runs, "reject" inserts nothing and the others (but PARALLEL)
# insert the run `waiting`, with no starting state (its worker builds the context when it starts,
# so it sees the answers of the runs before it).
_START = (
    "SELECT conv_found, active_ids, (started).*"
    " FROM run_start($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
)
# With a graph's input (migration 0021's overload); a start from text keeps to the first form.
_START_WITH_INPUT = (
    "SELECT conv_found, active_ids, (started).*"
    " FROM run_start($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
)


@dataclass(frozen=True)
class Admission:
    run: RunRow | None
    """The run stored; None when the policy refused it (nothing was written)."""
    active: list[str]
    """The conversation's active runs before this one, oldest first."""


async def start(
    conn: Conn,
    policy: str,
    run_id: str,
    conversation_id: str,
    user_id: str,
    message_id: str,
    text: str,
    agent: str,
    trace_context: dict[str, Any],
    first_event: tuple[str, bytes],
    checkpoint: dict[str, Any],
    graph_input: dict[str, Any] | None = None,
) -> Admission | None:
    """One statement (autocommit, or in the caller's transaction): None (nothing written) unless
    the conversation exists and belongs to `user_id`; else what `policy` admitted.
    `graph_input`: a graph agent's input as the caller gave it (migration 0021), kept with the
    run."""
    args = [
        run_id,
        conversation_id,
        user_id,
        message_id,
        text,
        agent,
        trace_context,
        first_event[0],
        first_event[1],
        WAKE_CHANNEL,
        checkpoint,
        policy,
    ]
    if graph_input is None:
        row = await conn.fetchrow(_START, *args)
    else:
        row = await conn.fetchrow(_START_WITH_INPUT, *args, graph_input)
    assert row is not None
    if not row["conv_found"]:
        return None
    return Admission(RunRow.of(row) if row["id"] else None, list(row["active_ids"]))


async def promote_stalled(conn: Conn) -> int:
    """Queue the oldest waiting run of each conversation left with no active run: the safety net
    for a run whose predecessor ended while the waiting run's insert was in flight (the trigger
    of migration 0013 ran before the insert committed). Any number of pods may run it at once:
    the promotion is one conditional UPDATE per conversation. Returns the runs queued."""
    n = await conn.fetchval(
        "SELECT count(*) FILTER (WHERE run_promote_waiting(c.conversation_id)) FROM "
        "(SELECT DISTINCT conversation_id FROM run WHERE status = 'waiting') c"
    )
    return int(n or 0)


async def start_parallel(
    conn: Conn,
    run_id: str,
    conversation_id: str,
    user_id: str,
    message_id: str,
    text: str,
    agent: str,
    trace_context: dict[str, Any],
    first_event: tuple[str, bytes],
    checkpoint: dict[str, Any],
) -> RunRow | None:
    """`start` with no policy: the run queued beside any active one (store tests, seeding)."""
    admitted = await start(
        conn,
        PARALLEL,
        run_id,
        conversation_id,
        user_id,
        message_id,
        text,
        agent,
        trace_context,
        first_event,
        checkpoint,
    )
    return admitted.run if admitted is not None else None
