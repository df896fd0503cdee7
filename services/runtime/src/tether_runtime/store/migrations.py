"""Versioned SQL migrations, applied in order under an advisory lock so pods may start together:
Tether's own first, then each agent's (an agent that needs tables ships them, DESIGN section 10),
each agent's tracked apart by its name."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable

import asyncpg

log = logging.getLogger(__name__)

_LOCK_ID = 0x7E74E5  # one constant advisory lock for "migrating tether"

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
    in turn; return the names applied by this call."""
    conn = await asyncpg.connect(dsn)
    applied: list[str] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_ID)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migration ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            core = _read(resources.files("tether_runtime.store").joinpath("migrations"))
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migration")}
            for version, name, sql in core:
                if version not in done:
                    async with conn.transaction():
                        await conn.execute(sql)
                        await conn.execute(
                            "INSERT INTO schema_migration (version, name) VALUES ($1, $2)",
                            version,
                            name,
                        )
                    log.info("applied migration", extra={"migration": name})
                    applied.append(name)
            for agent, spec in agents:
                applied += await _migrate_agent(conn, agent, agent_migrations(spec))
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_ID)
    finally:
        await conn.close()
    return applied


async def _migrate_agent(conn: asyncpg.Connection, agent: str, todo: list[Migration]) -> list[str]:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS agent_migration ("
        " agent text NOT NULL, version integer NOT NULL, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (agent, version))"
    )
    rows = await conn.fetch("SELECT version FROM agent_migration WHERE agent = $1", agent)
    done = {r["version"] for r in rows}
    applied = []
    for version, name, sql in todo:
        if version in done:
            continue
        async with conn.transaction():
            await conn.execute(sql)
            await conn.execute(
                "INSERT INTO agent_migration (agent, version, name) VALUES ($1, $2, $3)",
                agent,
                version,
                name,
            )
        log.info("applied agent migration", extra={"agent": agent, "migration": name})
        applied.append(f"{agent}/{name}")
    return applied


async def pending(dsn: str, agents: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The migrations this code knows that the database has not applied (`tether migrate
    --check`); newer ones it does not know are fine (expand, then contract)."""
    conn = await asyncpg.connect(dsn)
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
