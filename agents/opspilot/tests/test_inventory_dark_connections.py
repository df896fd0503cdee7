"""OpsPilot's writes go through when the pool's connections have gone dark (a NAT forgot them, a
link was cut: no FIN, no RST), against the real Postgres behind the test kit's fault proxy: the
dead connection costs one statement's timeout, the pool's other connections of that era are
expired with it, and the write lands once on a fresh one (inventory.on_live)."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import uuid

import asyncpg
import pytest
from tether_opspilot import inventory
from tether_opspilot.agent import inventory_pool
from tether_sdk import Host
from tether_testkit.fault_proxy import FaultProxy

pytestmark = pytest.mark.slow(seconds=11)


async def test_a_restart_lands_once_after_the_pools_connections_went_dark(
    database_url: str,
) -> None:
    url = urllib.parse.urlsplit(database_url)
    proxy = FaultProxy((url.hostname or "127.0.0.1", url.port or 5432)).start()
    netloc = (f"{url.username}@" if url.username else "") + proxy.addr
    dsn = urllib.parse.urlunsplit(url._replace(netloc=netloc))
    inst, key = f"dark-{uuid.uuid4().hex[:8]}", f"key-{uuid.uuid4().hex}"
    direct = await asyncpg.connect(database_url)
    opened = inventory_pool(Host(database_url=dsn))  # the agent's own pool, as it runs
    pool = await opened.__aenter__()
    try:
        await direct.execute(
            "INSERT INTO inv_service (name, env, replicas) VALUES ('dark', 'test', 1) "
            "ON CONFLICT DO NOTHING"
        )
        await direct.execute(
            "INSERT INTO inv_instance (id, service, env, status) "
            "VALUES ($1, 'dark', 'test', 'abnormal')",
            inst,
        )

        async def busy(conn: asyncpg.Connection) -> None:
            await conn.execute("SELECT pg_sleep(0.1)")

        await asyncio.gather(*(inventory.on_live(pool, busy) for _ in range(4)))
        assert await asyncio.to_thread(proxy.silence_open) == 4
        t = time.monotonic()
        first = await inventory.restart_instance(pool, "dark", "test", inst, key)
        took = time.monotonic() - t
        again = await inventory.restart_instance(pool, "dark", "test", inst, key)
        assert first["ok"] and first["restart_count"] == 1, first
        assert again == first  # the key answers what it did
        # one dead connection found (its statement's 5 s timeout, then its cancel's), not four
        assert took < 2 * 10.0, took
        n = await direct.fetchval("SELECT restart_count FROM inv_instance WHERE id = $1", inst)
        assert n == 1
    finally:
        await direct.execute("DELETE FROM inv_operation WHERE idempotency_key = $1", key)
        await direct.execute("DELETE FROM inv_instance WHERE id = $1", inst)
        await direct.close()
        pool.terminate()
        await opened.__aexit__(None, None, None)
        await asyncio.to_thread(proxy.stop)
