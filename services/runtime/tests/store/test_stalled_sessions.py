"""Sessions of the runtime's own application stalled mid-command inside a transaction are ended
(tether_runtime.store.stalled_sessions), against the real Postgres: Postgres itself never ends
them, and they keep their locks (the half-open Postgres row of the chaos table)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_runtime.store.db import create_pool
from tether_runtime.store.stalled_sessions import APPLICATION_NAME, end_stalled, session_name
from tether_testkit.stalled_pg_session import StalledSession


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(database_url)
    yield c
    await c.close()


def _name() -> str:  # each test's sessions are its own, whatever else shares the server
    return f"tether-test-{uuid.uuid4().hex[:8]}"


async def _state(conn: asyncpg.Connection, pid: int) -> tuple[str, str] | None:
    row = await conn.fetchrow("SELECT state, wait_event FROM pg_stat_activity WHERE pid = $1", pid)
    return (row["state"], row["wait_event"]) if row else None


async def _reaches(conn: asyncpg.Connection, pid: int, state: tuple[str, str]) -> bool:
    """Whether the backend shows `state` within 5 s: after its ParseComplete it still has to get
    back to reading the socket (pg_stat_activity shows `active` with no wait event meanwhile,
    which a loaded machine let a test see; a CI run failed on it)."""
    deadline = asyncio.get_running_loop().time() + 5.0
    while await _state(conn, pid) != state:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_a_session_stalled_past_the_limit_is_ended_and_its_locks_freed(
    conn: asyncpg.Connection, database_url: str
) -> None:
    name = _name()
    stalled = StalledSession(database_url, name, lock=4242)
    try:
        assert await _reaches(conn, stalled.pid, ("active", "ClientRead"))
        await asyncio.sleep(1.0)
        assert await _state(conn, stalled.pid) == ("active", "ClientRead")  # Postgres waits on
        assert not await conn.fetchval("SELECT pg_try_advisory_lock(4242)")  # and holds it
        assert await end_stalled(conn, name, older_than_s=0.5) == 1
        assert await asyncio.to_thread(stalled.ended, 5.0)
        assert await conn.fetchval("SELECT pg_try_advisory_lock(4242)")
        await conn.execute("SELECT pg_advisory_unlock(4242)")
        assert await end_stalled(conn, name, older_than_s=0.5) == 0
    finally:
        stalled.close()


async def test_only_the_named_stalled_sessions_past_the_limit_are_ended(
    conn: asyncpg.Connection, database_url: str
) -> None:
    name = _name()
    old = StalledSession(database_url, name)
    other = StalledSession(database_url, _name())  # another application's: never ours to end
    idle = StalledSession(database_url, name, stall=False)  # idle in a transaction: Postgres's
    try:
        await asyncio.sleep(1.2)
        young = StalledSession(database_url, name)  # a command that may still be arriving
        try:
            assert await end_stalled(conn, name, older_than_s=1.0) == 1
            assert await asyncio.to_thread(old.ended, 5.0)
            for alive in (other, idle, young):
                assert not await asyncio.to_thread(alive.ended)
                assert await _state(conn, alive.pid) is not None
            assert await _state(conn, idle.pid) == ("idle in transaction", "ClientRead")
        finally:
            young.close()
    finally:
        for s in (old, other, idle):
            s.close()


def test_the_sessions_name_is_the_dsns_or_the_runtimes() -> None:
    assert session_name("postgresql://u@h:5432/db") == APPLICATION_NAME == "tether-runtime"
    assert session_name("postgresql://u@h/db?sslmode=disable&application_name=rt-1") == "rt-1"


async def test_the_pool_names_its_sessions_so_that_they_can_be_found(database_url: str) -> None:
    named = database_url + ("&" if "?" in database_url else "?") + "application_name=x"
    for dsn, name in ((database_url, APPLICATION_NAME), (named, "x")):
        pool = await create_pool(dsn, min_size=1, max_size=1)
        try:
            assert await pool.fetchval("SELECT current_setting('application_name')") == name
        finally:
            await pool.close()
