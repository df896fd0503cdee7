"""Does a local store answer? `probe_stores.py postgres DSN [--create] [--connections N]` or
`... redis URL`.

Exit 0 if it answers. With --create, a missing Postgres database is created first. With
--connections N, a server whose max_connections is below N gets `ALTER SYSTEM SET
max_connections = N` and the exit code is 3: it must be restarted for that to apply."""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import redis.asyncio as aioredis

RESTART_NEEDED = 3


async def postgres(dsn: str, create: bool, connections: int) -> int:
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
    try:
        have = int(await conn.fetchval("SHOW max_connections"))
        if have >= connections:
            return 0
        await conn.execute(f"ALTER SYSTEM SET max_connections = {int(connections)}")
        print(f"postgres: max_connections {have} -> {connections} after a restart")
        return RESTART_NEEDED
    finally:
        await conn.close()


async def redis(url: str) -> None:
    client = aioredis.from_url(url, socket_connect_timeout=3)
    try:
        await client.ping()
    finally:
        await client.aclose()


def main() -> int:
    kind, target, *flags = sys.argv[1:]
    connections = int(flags[flags.index("--connections") + 1]) if "--connections" in flags else 0
    try:
        if kind == "postgres":
            return asyncio.run(postgres(target, "--create" in flags, connections))
        asyncio.run(redis(target))
    except (OSError, asyncpg.PostgresError, aioredis.RedisError, TimeoutError):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
