"""Versioned SQL migrations, applied in order under an advisory lock so pods may start together:
Tether's own first, then each agent's (an agent that needs tables ships them, DESIGN section 10),
each agent's tracked apart by its name."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable

import asyncpg
from tether_common.backoff import Backoff

from tether_runtime.store.db import RETRYABLE, connect, retrying

log = logging.getLogger(__name__)

_LOCK_ID = 0x7E74E5  # one constant advisory lock for "migrating tether"

# Migrations run while the previous release's pods serve (README, "Upgrading": expand). A
# statement that needs a strong lock (ALTER TABLE, CREATE TRIGGER) waits for the transactions
# holding a weaker one, and every statement of the fleet queues behind it meanwhile: a lock it
# cannot get within LOCK_TIMEOUT ends the attempt instead, and the migration is tried again from
# the start, as it is when it deadlocks with the fleet's own writes (seen: 0021 against 170 runs
# in flight, tests/integration/chaos/test_chaos_rolling_upgrade.py at full size). About two
# minutes of attempts in all before the error is the operator's.
LOCK_TIMEOUT = "2s"
LIVE_FLEET_RETRYABLE = (*RETRYABLE, asyncpg.exceptions.LockNotAvailableError)
LIVE_FLEET_ATTEMPTS = 40
LIVE_FLEET_BACKOFF = Backoff(0.2, cap_s=2.0, jitter=(0.5, 1.0))

Migration = tuple[int, str, str]


def _read(folder: Traversable) -> list[Migration]:
    out = []
    for f in folder.iterdir():
        if f.name.endswith(".sql"):
            version = int(f.name.split("_", 1)[0])
            out.append((version, f.name, f.read_text()))
    return sorted(out)


def agent_migrations(spec: str) -> list[Migration]:
    """`spec` is "package:folder" (Agent.migrations)."""
    package, _, folder = spec.partition(":")
    path = resources.files(package)
    for part in folder.split("/"):
        path = path.joinpath(part)
    if not path.is_dir():
        raise FileNotFoundError(f"agent migrations {spec!r}: no such folder in the package")
    return _read(path)


async def migrate(dsn: str, agents: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Apply every migration not applied yet, Tether's then each (agent name, "package:folder")
    in turn; return the names applied by this call.

    Each migration is one transaction that first takes a transaction-scoped advisory lock and
    then re-reads what is applied: two pods migrating at once apply each migration once, and
    nothing outlives a transaction, so this works through a transaction pooler (PgBouncer) as
    well as on a direct connection (a session lock would be held by whichever server connection
    took it, and its unlock could land on another)."""
    conn = await connect(dsn)
    applied: list[str] = []
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migration ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS agent_migration ("
                " agent text NOT NULL, version integer NOT NULL, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (agent, version))"
            )
        core = _read(resources.files("tether_runtime.store").joinpath("migrations"))
        for version, name, sql in core:
            if await _apply(conn, "", version, name, sql):
                log.info("applied migration", extra={"migration": name})
                applied.append(name)
        for agent, spec in agents:
            for version, name, sql in agent_migrations(spec):
                if await _apply(conn, agent, version, name, sql):
                    log.info("applied agent migration", extra={"agent": agent, "migration": name})
                    applied.append(f"{agent}/{name}")
    finally:
        await conn.close()
    return applied


async def _apply(conn: asyncpg.Connection, agent: str, version: int, name: str, sql: str) -> bool:
    """Apply one migration (Tether's when `agent` is empty) unless it is applied already; the
    check and the migration hold the lock together, so another pod waits, then sees it done.
    A lock not had within LOCK_TIMEOUT, or a deadlock with the live fleet, rolls the attempt
    back whole and tries again."""

    async def once(conn: asyncpg.Connection) -> bool:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
        await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        if agent:
            done = await conn.fetchval(
                "SELECT 1 FROM agent_migration WHERE agent = $1 AND version = $2", agent, version
            )
        else:
            done = await conn.fetchval("SELECT 1 FROM schema_migration WHERE version = $1", version)
        if done:
            return False
        await conn.execute(sql)
        if agent:
            await conn.execute(
                "INSERT INTO agent_migration (agent, version, name) VALUES ($1, $2, $3)",
                agent,
                version,
                name,
            )
        else:
            await conn.execute(
                "INSERT INTO schema_migration (version, name) VALUES ($1, $2)", version, name
            )
        return True

    return await retrying(
        conn,
        once,
        LIVE_FLEET_ATTEMPTS,
        retryable=LIVE_FLEET_RETRYABLE,
        backoff=LIVE_FLEET_BACKOFF,
    )


async def pending(dsn: str, agents: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The migrations this code knows that the database has not applied (`tether migrate
    --check`); newer ones it does not know are fine (expand, then contract)."""
    conn = await connect(dsn)
    try:
        core = _read(resources.files("tether_runtime.store").joinpath("migrations"))
        done: set[int] = set()
        if await conn.fetchval("SELECT to_regclass('schema_migration') IS NOT NULL"):
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migration")}
        missing = [name for version, name, _ in core if version not in done]
        has_agent_table = await conn.fetchval("SELECT to_regclass('agent_migration') IS NOT NULL")
        for agent, spec in agents:
            applied: set[int] = set()
            if has_agent_table:
                rows = await conn.fetch(
                    "SELECT version FROM agent_migration WHERE agent = $1", agent
                )
                applied = {r["version"] for r in rows}
            missing += [
                f"{agent}/{name}"
                for version, name, _ in agent_migrations(spec)
                if version not in applied
            ]
        return missing
    finally:
        await conn.close()
