"""run_event's partitions (migration 0019): whole days made ahead of time, and those wholly past
TETHER_EVENT_RETENTION_S dropped, by a job any number of pods may run at once (a transaction-scoped
advisory lock: a pod that finds it taken skips its turn, and each turn re-reads the catalog, so
running it again changes nothing). Also the retention horizon that GetRun and streams compare."""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass, field

import asyncpg

from tether_runtime.domain.records import TERMINAL_STATUSES
from tether_runtime.store.db import Conn

log = logging.getLogger(__name__)

_LOCK_ID = 0x7E74E6  # "maintaining run_event's partitions", beside migrations.py's 0x7E74E5
AHEAD_DAYS = 3
"""Days of partitions kept ready past today: the job may miss that many days of turns (every pod
down, or every turn losing its lock) before new runs' events land in the default partition."""
LOCK_TIMEOUT = "1s"
"""Attaching a partition locks the default partition, dropping one locks run_event itself
(ACCESS EXCLUSIVE: Postgres changes the partition map), so appends and reads wait behind the
job's DDL; a turn that cannot get its locks within this gives up and the next turn retries.
That bounds the stall an append sees to this once a day."""

_BOUND = re.compile(r"FROM \((?:MINVALUE|'([a-z0-9_]+)')\) TO \('([a-z0-9_]+)'\)")
_NAME = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True)
class Partition:
    name: str
    lo: str | None  # None: MINVALUE (the table converted by migration 0019)
    hi: str


@dataclass
class Turn:
    """What one turn of the job did."""

    ran: bool = True
    """False: another pod held the lock (or the locks timed out); nothing was changed."""
    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    moved: int = 0
    """Rows moved out of the default partition into a partition created for them."""
    kept_for: str | None = None
    """A run that is not finished yet and keeps its (expired) partition, and every later one."""


async def partitions(conn: Conn) -> list[Partition]:
    """run_event's range partitions, oldest first. Not listed: the default partition, and one
    not of our making (its name or bounds of another shape), which the job never drops."""
    rows = await conn.fetch(
        "SELECT c.relname::text AS name, pg_get_expr(c.relpartbound, c.oid) AS bound "
        "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'run_event'::regclass"
    )
    out = []
    for r in rows:
        m = _BOUND.fullmatch(r["bound"].removeprefix("FOR VALUES "))
        if m and _NAME.fullmatch(r["name"]):
            out.append(Partition(r["name"], m.group(1), m.group(2)))
    # Bounds are 'run_' and ten base32 digits in ascending ASCII: string order is time order.
    return sorted(out, key=lambda p: p.hi)


async def horizon(conn: Conn) -> str:
    """Run ids below this had their events dropped ('' while nothing was)."""
    return str(await conn.fetchval("SELECT horizon FROM event_retention"))


def below(horizon: str, run_id: str) -> bool:
    """`run_id < horizon` as Postgres compares them: both are 'run_' then lower-case base32
    digits, which sort by code point in C and in the linguistic collations alike."""
    return run_id < horizon


async def events_expired(conn: Conn, run_id: str) -> bool:
    return bool(await conn.fetchval("SELECT $1 < horizon FROM event_retention", run_id))


async def maintain(conn: Conn, retention_s: float, *, now: dt.datetime | None = None) -> Turn:
    """One turn: create the partitions up to AHEAD_DAYS past today, then drop the partitions whose
    every run was created more than `retention_s` ago (0: keep forever), oldest first, stopping at
    one that still holds a run that is not finished (its events are still being read and written;
    it is dropped on a later turn, once the run ends). `now` defaults to the database's clock."""
    turn = Turn()
    try:
        async with conn.transaction():
            if not await _locked(conn):
                return Turn(ran=False)
            at = now or await conn.fetchval("SELECT now()")
            await _create_ahead(conn, at, turn)
        if retention_s > 0:
            async with conn.transaction():
                if not await _locked(conn):
                    return turn
                await _drop_expired(conn, at, retention_s, turn)
    except asyncpg.LockNotAvailableError:
        log.warning(
            "event partitions: locks not granted within %s, next turn retries", LOCK_TIMEOUT
        )
        turn.ran = False
    return turn


async def _locked(conn: Conn) -> bool:
    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    return bool(await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK_ID))


async def _create_ahead(conn: Conn, at: dt.datetime, turn: Turn) -> None:
    # Day boundaries (UTC) from a week back to AHEAD_DAYS past today, as id bounds, each with
    # the name of the day it closes.
    days = await conn.fetch(
        "SELECT tether_id_floor('run', d) AS bound, "
        "to_char((d - interval '1 day') AT TIME ZONE 'UTC', 'YYYYMMDD') AS closes "
        "FROM generate_series(date_trunc('day', $1::timestamptz AT TIME ZONE 'UTC') "
        "AT TIME ZONE 'UTC' - interval '7 days', date_trunc('day', $1::timestamptz AT TIME ZONE "
        "'UTC') AT TIME ZONE 'UTC' + make_interval(days => $2), interval '1 day') d ORDER BY d",
        at,
        AHEAD_DAYS,
    )
    existing = await partitions(conn)
    covered = existing[-1].hi if existing else None
    for day in days:
        bound, closes = str(day["bound"]), str(day["closes"])
        if covered is not None and bound <= covered:
            continue
        if covered is None:  # no range partition at all (never so after migration 0019)
            covered = bound
            continue
        # From where the last partition ends (a gap of missed days joins the first new one).
        turn.moved += await _create(conn, f"run_event_p{closes}", covered, bound)
        turn.created.append(f"run_event_p{closes}")
        covered = bound
    if turn.created:
        log.info("event partitions created", extra={"partitions": turn.created})


async def _create(conn: Conn, name: str, lo: str, hi: str) -> int:
    """A table of its own, attached (the parent stays open to appends: ATTACH takes SHARE UPDATE
    EXCLUSIVE on it, where CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE). Rows the
    default partition took for this range meanwhile move in first, or the attach would fail."""
    table = _ident(name)
    await conn.execute(f"CREATE TABLE {table} (LIKE run_event INCLUDING DEFAULTS)")
    await conn.execute(f"ALTER TABLE {table} ADD PRIMARY KEY (run_id, sequence)")
    moved = 0
    if await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM run_event_default WHERE run_id >= $1 AND run_id < $2)", lo, hi
    ):
        result = await conn.execute(
            f"WITH m AS (DELETE FROM run_event_default WHERE run_id >= $1 AND run_id < $2 "
            f"RETURNING run_id, sequence, type, data, created_at) "
            f"INSERT INTO {table} (run_id, sequence, type, data, created_at) SELECT * FROM m",
            lo,
            hi,
        )
        moved = int(str(result).rsplit(" ", 1)[-1])
    await conn.execute(
        f"ALTER TABLE run_event ATTACH PARTITION {table} "
        f"FOR VALUES FROM ({_literal(lo)}) TO ({_literal(hi)})"
    )
    return moved


async def _drop_expired(conn: Conn, at: dt.datetime, retention_s: float, turn: Turn) -> None:
    cutoff = str(
        await conn.fetchval(
            "SELECT tether_id_floor('run', $1::timestamptz - make_interval(secs => $2))",
            at,
            retention_s,
        )
    )
    for p in await partitions(conn):
        if p.hi > cutoff:
            break  # a run of this partition was created within retention
        unfinished = await conn.fetchval(
            "SELECT id FROM run WHERE ($1::text IS NULL OR id >= $1) AND id < $2 "
            "AND status <> ALL($3::text[]) LIMIT 1",
            p.lo,
            p.hi,
            list(TERMINAL_STATUSES),
        )
        if unfinished is not None:
            turn.kept_for = str(unfinished)
            log.info(
                "event partition past retention kept: a run in it is not finished",
                extra={"partition": p.name, "kept_for": turn.kept_for},
            )
            break  # the horizon is one bound: later partitions wait for this one
        await conn.execute(f"DROP TABLE {_ident(p.name)}")
        await conn.execute(
            "UPDATE event_retention SET horizon = greatest(horizon, $1), updated_at = now()", p.hi
        )
        turn.dropped.append(p.name)
    if turn.dropped:
        log.info("event partitions dropped", extra={"partitions": turn.dropped})


def _ident(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a partition name: {name!r}")
    return name


def _literal(bound: str) -> str:
    """A bound in DDL (which takes no parameters): ours are 'run_' and base32 digits."""
    if not _NAME.fullmatch(bound):
        raise ValueError(f"not a partition bound: {bound!r}")
    return f"'{bound}'"
