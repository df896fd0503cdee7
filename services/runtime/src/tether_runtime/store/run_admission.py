"""StartRun under the agent's `concurrent_runs` policy (issue 18): whether the conversation has
an active run decides if the new run is refused, stored `waiting` behind it, or queued.

Exact under concurrent starts in one conversation: the conversation row is locked first (FOR NO
KEY UPDATE, the lock any UPDATE of it takes; the FK checks of inserted messages and runs take
KEY SHARE, which it does not block), and only then, in a statement of its own and so with a
snapshot taken after the lock, are the active runs read and the run inserted. Both happen inside
one plpgsql function (migration 0018), so a start costs one round trip. Two starts in one
conversation take turns; starts in different conversations never wait for each other."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tether_common import json_codec
from tether_proto import wire

from tether_runtime.domain.records import RunRow
from tether_runtime.store import db
from tether_runtime.store.db import Conn, Pool
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


@dataclass(frozen=True)
class Start:
    """One StartRun's admission, as `start` takes it (from text: no graph input)."""

    policy: str
    run_id: str
    conversation_id: str
    user_id: str
    message_id: str
    text: str
    agent: str
    trace_context: dict[str, Any]
    first_event: tuple[str, bytes]
    checkpoint: dict[str, Any]

    def values(
        self,
    ) -> tuple[
        str, str, str, str, str, str, str, dict[str, Any], tuple[str, bytes], dict[str, Any]
    ]:
        """The fields in `start`'s order of arguments (after the connection)."""
        return (
            self.policy,
            self.run_id,
            self.conversation_id,
            self.user_id,
            self.message_id,
            self.text,
            self.agent,
            self.trace_context,
            self.first_event,
            self.checkpoint,
        )


async def admit(
    conn: Conn, s: Start, graph_input: dict[str, Any] | None = None
) -> Admission | None:
    """`start` for one Start, in a statement of its own (with a graph's input, if any)."""
    return await start(conn, *s.values(), graph_input=graph_input)


# Many starts in one statement: `run_start` called once per row, in the order given (each call
# sees the rows the calls before it inserted, as consecutive statements would). The rows come
# sorted by conversation, so two batches lock conversations in one order and never deadlock
# each other; a start waits for a locked conversation as a statement of its own would.
_START_MANY = (
    "SELECT a.i, s.conv_found, s.active_ids, (s.started).*"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],"
    " $7::text[], $8::text[], $9::bytea[], $10::text[], $11::text[])"
    " WITH ORDINALITY AS a(run_id, conv, usr, msg, txt, agent, trace, typ, data, cp, policy, i)"
    " CROSS JOIN LATERAL run_start(a.run_id, a.conv, a.usr, a.msg, a.txt, a.agent,"
    " a.trace::jsonb, a.typ, a.data, $12, a.cp::jsonb, a.policy) s"
    " ORDER BY a.i"
)


async def start_many(conn: Conn, starts: list[Start]) -> list[Admission | None]:
    """`start` for each of `starts` in ONE statement (autocommit: all of them or, if it fails,
    none), in their order; each answer as `start` gives it."""
    cols: list[list[Any]] = [[] for _ in range(11)]
    for s in starts:
        policy, *rest, trace, (kind, data), checkpoint = s.values()
        row = (*rest, json_codec.dumps(trace), kind, data, json_codec.dumps(checkpoint), policy)
        for col, value in zip(cols, row, strict=True):
            col.append(value)
    rows = await conn.fetch(_START_MANY, *cols, WAKE_CHANNEL)
    answers: list[Admission | None] = [None] * len(starts)
    for row in rows:
        if row["conv_found"]:
            answers[row["i"] - 1] = Admission(
                RunRow.of(row) if row["id"] else None, list(row["active_ids"])
            )
    return answers


class Admissions:
    """The admissions of every StartRun of this process without an idempotency key: those that
    arrive while one statement is in flight go together in the next (`start_many`), as the
    event sink batches appends. A burst of starts then costs a few statements, not one each.

    A batch of more than one that fails (bad input in one start, say) is tried again one start
    per statement, so only the start at fault sees the error; deadlocks and serialization
    failures are retried as any statement is (`db.retrying`)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self._queue: list[tuple[Start, asyncio.Future[Admission | None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self, start: Start) -> Admission | None:
        done: asyncio.Future[Admission | None] = asyncio.get_running_loop().create_future()
        self._queue.append((start, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="run-admissions")
        return await done

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            batch.sort(key=lambda item: item[0].conversation_id)  # stable: arrival order kept
            try:
                answers = await self._admit([s for s, _ in batch])
            except Exception as err:  # noqa: BLE001 - handed to each waiting start
                if len(batch) == 1:
                    _settle(batch[0][1], err)
                    continue
                for start, done in batch:  # one by one: only the faulty start fails
                    try:
                        (answer,) = await self._admit([start])
                    except Exception as one:  # noqa: BLE001 - handed to its start
                        _settle(done, one)
                    else:
                        _settle(done, answer)
                continue
            for (_, done), answer in zip(batch, answers, strict=True):
                _settle(done, answer)

    async def _admit(self, starts: list[Start]) -> list[Admission | None]:
        return await db.retrying(
            self.pool, lambda conn: start_many(conn, starts), transaction=False
        )


def _settle(done: asyncio.Future[Admission | None], answer: Admission | None | Exception) -> None:
    if done.done():
        return  # its StartRun was cancelled (the client left); the run, if stored, still runs
    if isinstance(answer, Exception):
        done.set_exception(answer)
    else:
        done.set_result(answer)


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
