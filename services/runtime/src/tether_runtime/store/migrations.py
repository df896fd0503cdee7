"""Versioned SQL migrations, applied in order under an advisory lock so pods may start together."""

from __future__ import annotations

import logging
from importlib import resources

import asyncpg

log = logging.getLogger(__name__)

_LOCK_ID = 0x7E74E5  # one constant advisory lock for "migrating tether"


def _migrations() -> list[tuple[int, str, str]]:
    files = resources.files("tether_runtime.store").joinpath("migrations")
    out = []
    for f in files.iterdir():
        if f.name.endswith(".sql"):
            version = int(f.name.split("_", 1)[0])
            out.append((version, f.name, f.read_text()))
    return sorted(out)


async def migrate(dsn: str) -> list[str]:
    """Apply every migration not applied yet; return the names applied by this call."""
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
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migration")}
            for version, name, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO schema_migration (version, name) VALUES ($1, $2)",
                        version,
                        name,
                    )
                log.info("applied migration", extra={"migration": name})
                applied.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_ID)
    finally:
        await conn.close()
    return applied
