"""The services this example manages, in its own tables of Tether's database (its migrations):
a pool opened once per runtime process by the agent's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from tether_sdk import Host

SERVICES = [("checkout", "degraded"), ("search", "healthy"), ("billing", "healthy")]

_pool: Any = None


def pool() -> Any:
    if _pool is None:
        raise RuntimeError("the ops agent's lifespan has not opened its pool")
    return _pool


@asynccontextmanager
async def lifespan(host: Host) -> AsyncIterator[Any]:
    global _pool
    # Behind a transaction pooler, no statement cache (a cached statement may be missing on the
    # next server connection).
    cache = 0 if host.transaction_pooler else 100
    _pool = await asyncpg.create_pool(
        host.database_url, min_size=1, max_size=4, statement_cache_size=cache
    )
    try:
        yield _pool
    finally:
        await _pool.close()
        _pool = None


async def seed(state: Any) -> None:
    """The demo services (`tether seed-demo`); idempotent."""
    async with state.acquire() as conn:
        await conn.executemany(
            "INSERT INTO lgops_service (name, status) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            SERVICES,
        )


async def status_of(service: str) -> str | None:
    async with pool().acquire() as conn:
        found: str | None = await conn.fetchval(
            "SELECT status FROM lgops_service WHERE name = $1", service
        )
        return found


async def restart(service: str, key: str | None) -> None:
    async with pool().acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO lgops_restart (service, idempotency_key) VALUES ($1, $2)", service, key
        )
        await conn.execute("UPDATE lgops_service SET status = 'healthy' WHERE name = $1", service)
