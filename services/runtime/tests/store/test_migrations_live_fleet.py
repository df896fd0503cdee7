"""Migrations applied under a live fleet (README, "Upgrading": expand): a migration that deadlocks
with the pods' own writes, or cannot get its lock soon, is rolled back whole and tried again,
instead of failing the upgrade (0021 deadlocked so against 170 runs in flight in the rolling
upgrade's full size) or queueing every statement of the fleet behind it."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_runtime.store import migrations
from tether_runtime.store.db import connect, retrying

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def tables(database_url: str) -> AsyncIterator[tuple[str, str, str]]:
    """Two scratch tables and an agent name of this test's own."""
    tag = secrets.token_hex(4)
    a, b, agent = f"mig_a_{tag}", f"mig_b_{tag}", f"live-fleet-{tag}"
    conn = await connect(database_url)
    await conn.execute(f"CREATE TABLE {a} (id int); CREATE TABLE {b} (id int)")
    try:
        yield a, b, agent
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {a}; DROP TABLE IF EXISTS {b}")
        await conn.execute("DELETE FROM agent_migration WHERE agent = $1", agent)
        await conn.close()


async def _locks(conn: asyncpg.Connection, table: str, mode: str, *, granted: bool) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND mode = $2"
            " AND granted = $3",
            table,
            mode,
            granted,
        )
    )


async def test_a_migration_that_deadlocks_with_a_pod_is_tried_again(
    database_url: str, tables: tuple[str, str, str]
) -> None:
    a, b, agent = tables
    sql = f"ALTER TABLE {a} ADD COLUMN x int; ALTER TABLE {b} ADD COLUMN x int;"
    pod, migrator, watcher = [await connect(database_url) for _ in range(3)]
    try:
        # Postgres ends the transaction whose deadlock check runs first: the pod's runs only
        # after 10 s of waiting, the migration's after the default 1 s, so the cycle below is
        # always broken on the migration's side, whatever the machine's load.
        await pod.execute("SET deadlock_timeout = '10s'")
        pod_tx = pod.transaction()
        await pod_tx.start()
        await pod.execute(f"INSERT INTO {b} VALUES (1)")  # a pod's write holds b
        applying = asyncio.create_task(migrations._apply(migrator, agent, 1, "0001_x.sql", sql))
        deadline = time.monotonic() + 30
        # The migration holds a and waits for b (behind the pod's write).
        while not (
            await _locks(watcher, a, "AccessExclusiveLock", granted=True)
            and await _locks(watcher, b, "AccessExclusiveLock", granted=False)
        ):
            assert time.monotonic() < deadline and not applying.done(), "the migration never ran"
            await asyncio.sleep(0.02)
        # The pod now writes a: a cycle. Postgres ends the migration's transaction; before, that
        # failed `tether migrate` with DeadlockDetectedError.
        await pod.execute(f"INSERT INTO {a} VALUES (1)")
        await pod_tx.commit()
        assert await asyncio.wait_for(applying, 60) is True
        columns = await watcher.fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'x'"
            " AND table_name = ANY($1::text[])",
            [a, b],
        )
        assert columns == 2
        assert await watcher.fetchval(f"SELECT count(*) FROM {a}") == 1  # the pod's write held
        assert (
            await watcher.fetchval("SELECT count(*) FROM agent_migration WHERE agent = $1", agent)
            == 1
        )
    finally:
        if "applying" in locals():
            applying.cancel()
            await asyncio.gather(applying, return_exceptions=True)
        for c in (pod, migrator, watcher):
            await c.close()


async def test_a_migration_waits_for_its_lock_only_briefly_then_tries_again(
    database_url: str, tables: tuple[str, str, str]
) -> None:
    """A long transaction of a pod holds a: the migration gives up its queued lock after
    LOCK_TIMEOUT (so the fleet's statements do not queue behind it for as long as that
    transaction lasts) and gets it on a later attempt."""
    a, _b, agent = tables
    pod, migrator, other = [await connect(database_url) for _ in range(3)]
    try:
        pod_tx = pod.transaction()
        await pod_tx.start()
        await pod.execute(f"INSERT INTO {a} VALUES (1)")
        applying = asyncio.create_task(
            migrations._apply(migrator, agent, 1, "0001_x.sql", f"ALTER TABLE {a} ADD COLUMN x int")
        )
        # While the pod's transaction lasts (longer than LOCK_TIMEOUT), another pod's write to
        # the same table is never stuck for long behind the waiting ALTER.
        stuck = 0.0
        for _ in range(3):
            began = time.monotonic()
            await asyncio.wait_for(other.execute(f"INSERT INTO {a} VALUES (2)"), 30)
            stuck = max(stuck, time.monotonic() - began)
            await asyncio.sleep(1.0)
        assert not applying.done(), "the migration ran while the pod's transaction held the table"
        await pod_tx.commit()
        assert await asyncio.wait_for(applying, 60) is True
        assert stuck < 10, f"a pod's write waited {stuck:.1f}s behind the migration"
    finally:
        if "applying" in locals():
            applying.cancel()
            await asyncio.gather(applying, return_exceptions=True)
        for c in (pod, migrator, other):
            await c.close()


async def test_a_pods_transaction_whose_statement_a_migration_changed_is_run_again(
    database_url: str, tables: tuple[str, str, str]
) -> None:
    """An expand migration adds a column while a pod serves: the pod's cached `SELECT *` no longer
    fits ("cached plan must not change result type"). Outside a transaction asyncpg prepares it
    again by itself; inside one the transaction is lost, so `retrying` runs it again (the rolling
    upgrade's full size caught the release before this one answering such a ResumeRun INTERNAL)."""
    a, _, _ = tables
    # The pod's connection caches its statements, as the runtime's pool does (db.connect's, for
    # short jobs, caches none).
    pod, migrator = await asyncpg.connect(database_url), await connect(database_url)
    try:
        await pod.execute(f"INSERT INTO {a} VALUES (1)")
        assert len(await pod.fetch(f"SELECT * FROM {a}")) == 1  # prepared and cached
        await migrator.execute(f"ALTER TABLE {a} ADD COLUMN y int DEFAULT 7")
        attempts = 0

        async def read(conn: asyncpg.Connection) -> list[asyncpg.Record]:
            nonlocal attempts
            attempts += 1
            return list(await conn.fetch(f"SELECT * FROM {a}"))

        rows = await retrying(pod, read)
        assert attempts == 2, "the first attempt met the stale plan and the transaction ran again"
        assert [dict(r) for r in rows] == [{"id": 1, "y": 7}]
    finally:
        await pod.close()
        await migrator.close()
