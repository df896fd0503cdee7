"""Does a local store answer? `probe_stores.py postgres DSN [--create]` or `... redis URL`.

Exit 0 if it answers. With --create, a missing Postgres database is created first."""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import redis.asyncio as aioredis


async def postgres(dsn: str, create: bool) -> None:
    try:
        conn = await asyncpg.connect(dsn, timeout=3)
    except asyncpg.InvalidCatalogNameError:
        if not create:
            raise
        name = urlsplit(dsn).path.lstrip("/")
        admin = await asyncpg.connect(
            urlunsplit(urlsplit(dsn)._replace(path="/postgres")), timeout=3
        )
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close()
        conn = await asyncpg.connect(dsn, timeout=3)
    await conn.close()


async def redis(url: str) -> None:
    client = aioredis.from_url(url, socket_connect_timeout=3)
    try:
        await client.ping()
    finally:
        await client.aclose()


def main() -> int:
    kind, target, *flags = sys.argv[1:]
    try:
        if kind == "postgres":
            asyncio.run(postgres(target, "--create" in flags))
        else:
            asyncio.run(redis(target))
    except (OSError, asyncpg.PostgresError, aioredis.RedisError, TimeoutError):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
