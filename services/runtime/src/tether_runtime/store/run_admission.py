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

import asyncpg
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


@dataclass(frozen=True)
class Start:
    """One StartRun's admission: the run and its user's message, its first event, its starting
    checkpoint, the agent's `concurrent_runs` policy; `graph_input`: a graph agent's input as the
    caller gave it (migration 0021), kept with the run."""

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
    graph_input: dict[str, Any] | None = None


async def start(conn: Conn, s: Start) -> Admission | None:
    """One statement (autocommit, or in the caller's transaction): None (nothing written) unless
    the conversation exists and belongs to `s.user_id`; else what `s.policy` admitted."""
    args = [
        s.run_id,
        s.conversation_id,
        s.user_id,
        s.message_id,
        s.text,
        s.agent,
        s.trace_context,
        s.first_event[0],
        s.first_event[1],
        WAKE_CHANNEL,
        s.checkpoint,
        s.policy,
    ]
    if s.graph_input is None:
        row = await conn.fetchrow(_START, *args)
    else:
        row = await conn.fetchrow(_START_WITH_INPUT, *args, s.graph_input)
    assert row is not None
    return _admission(row)


def _admission(row: Any) -> Admission | None:
    if not row["conv_found"]:
        return None
    return Admission(RunRow.of(row) if row["id"] else None, list(row["active_ids"]))


# Many starts in one statement: `run_start` (migration 0021's form; a NULL input is a start from
# text) called once per row, in the order given (each call sees the rows the calls before it
# inserted, as consecutive statements would). The rows come sorted by conversation, so two
# batches lock conversations in one order and never deadlock each other; a start waits for a
# locked conversation as a statement of its own would.
_START_MANY = (
    "SELECT a.i, s.conv_found, s.active_ids, (s.started).*"
    " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],"
    " $7::text[], $8::text[], $9::bytea[], $10::text[], $11::text[], $12::text[])"
    " WITH ORDINALITY"
    " AS a(run_id, conv, usr, msg, txt, agent, trace, typ, data, cp, policy, input, i)"
    " CROSS JOIN LATERAL run_start(a.run_id, a.conv, a.usr, a.msg, a.txt, a.agent,"
    " a.trace::jsonb, a.typ, a.data, $13, a.cp::jsonb, a.policy, a.input::jsonb) s"
    " ORDER BY a.i"
)


async def start_many(conn: Conn, starts: list[Start]) -> list[Admission | None]:
    """`start` for each of `starts` in ONE statement (autocommit: all of them or, if it fails,
    none), in their order; each answer as `start` gives it."""
    dumps = json_codec.dumps
    rows = await conn.fetch(
        _START_MANY,
        [s.run_id for s in starts],
        [s.conversation_id for s in starts],
        [s.user_id for s in starts],
        [s.message_id for s in starts],
        [s.text for s in starts],
        [s.agent for s in starts],
        [dumps(s.trace_context) for s in starts],
        [s.first_event[0] for s in starts],
        [s.first_event[1] for s in starts],
        [dumps(s.checkpoint) for s in starts],
        [s.policy for s in starts],
        [None if s.graph_input is None else dumps(s.graph_input) for s in starts],
        WAKE_CHANNEL,
    )
    answers: list[Admission | None] = [None] * len(starts)
    for row in rows:
        answers[row["i"] - 1] = _admission(row)
    return answers


class Admissions:
    """The admissions of every StartRun of this process without an idempotency key: those that
    arrive while one statement is in flight go together in the next (`start_many`), as the
    event sink batches appends. A burst of starts then costs a few statements, not one each.

    A start whose caller left while it waited (its StartRun cancelled) is not sent: nobody would
    learn of its run. A batch of more than one that Postgres refuses (bad input in one start,
    say) is tried again one start per statement, so only the start at fault sees the error; a
    store that cannot be reached fails the whole batch at once; deadlocks and serialization
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
            batch = [(s, done) for s, done in self._queue if not done.done()]
            self._queue = []
            batch.sort(key=lambda item: item[0].conversation_id)  # stable: arrival order kept
            if not batch:
                continue
            try:
                answers = await self._admit([s for s, _ in batch])
            except asyncpg.PostgresError as err:
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
            except Exception as err:  # noqa: BLE001 - the store failed: every start sees it
                for _, done in batch:
                    _settle(done, err)
                continue
            for (_, done), answer in zip(batch, answers, strict=True):
                _settle(done, answer)

    async def _admit(self, starts: list[Start]) -> list[Admission | None]:
        return await db.retrying(
            self.pool, lambda conn: start_many(conn, starts), transaction=False
        )


def _settle(done: asyncio.Future[Admission | None], answer: Admission | None | Exception) -> None:
    if done.done():
        return  # its StartRun was cancelled meanwhile (the client left); its run still runs
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
        Start(
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
        ),
    )
    return admitted.run if admitted is not None else None
