"""The asyncpg pool: one per process, JSON codecs installed once."""

from __future__ import annotations

import json

import asyncpg

Pool = asyncpg.Pool
Conn = asyncpg.Connection


async def _init(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, *, min_size: int = 2, max_size: int = 20) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init, command_timeout=30
    )
    assert pool is not None
    return pool
