"""Tether behind a real PgBouncer in transaction mode (issue #17): runtimes and gateways whose
DATABASE_URL shares a small server pool, so transactions of different clients really interleave
on the same server connections; LISTEN through a session-mode DSN; polling without one;
migrations racing through the pooler; and the settings that break there without the fix."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_common.auth import issue_token
from tether_runtime.store.db import create_pool
from tether_runtime.store.stalled_sessions import end_stalled
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.pgbouncer import PgBouncer, database_of, pgbouncer
from tether_testkit.processes import Proc, start_gateway, start_runtime, tether_cli
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import Frame, SseReader
from tether_testkit.stalled_pg_session import StalledSession

POOL_SIZE = 3  # server connections per database: far fewer than the clients' connections
IDLE_POLL = "600"  # a worker that waits this long between claims wakes only by NOTIFY


@pytest.fixture
def bouncer(admin_dsn: str, private_env: dict[str, str]) -> Iterator[PgBouncer]:
    db = database_of(private_env["DATABASE_URL"])
    with pgbouncer(admin_dsn, pool_size=POOL_SIZE, session_dbs=[db]) as b:
        yield b


@pytest.fixture
def pooled_env(private_env: dict[str, str], bouncer: PgBouncer) -> dict[str, str]:
    """Every Tether process of the test on the pooler: transaction mode for DATABASE_URL, the
    session alias for LISTEN."""
    db = database_of(private_env["DATABASE_URL"])
    return {
        **private_env,
        "DATABASE_URL": bouncer.url(db),
        "TETHER_DB_POOLER": "transaction",
        "TETHER_DB_LISTEN_URL": bouncer.url(db, session=True),
    }


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session:
        yield session


@pytest.fixture
async def direct(private_env: dict[str, str]) -> AsyncIterator[Any]:
    """A connection straight to Postgres, for the test's own checks."""
    conn = await asyncpg.connect(private_env["DATABASE_URL"])
    yield conn
    await conn.close()


def headers(user: str = "alice", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, user)}", **extra}


async def new_run(http: aiohttp.ClientSession, base: str, text: str) -> str:
    async with http.post(f"{base}/v1/conversations", json={"title": "pgb"}, headers=headers()) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    body = {"text": text, "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{base}/v1/conversations/{conv}/runs", json=body, headers=headers()) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["run"]["id"])


async def events(http: aiohttp.ClientSession, base: str, run_id: str) -> SseReader:
    h = headers(Accept="text/event-stream")
    return SseReader(await http.get(f"{base}/v1/runs/{run_id}/events", headers=h))


async def approve(http: aiohttp.ClientSession, base: str, run_id: str, interrupt_id: str) -> None:
    body = {"interruptId": interrupt_id, "decision": "approve", "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{base}/v1/runs/{run_id}/resume", json=body, headers=headers()) as r:
        assert r.status == 202, await r.text()


async def run_status(conn: Any, run_id: str) -> str:
    return str(await conn.fetchval("SELECT status FROM run WHERE id = $1", run_id))


def dense(frames: list[Frame]) -> list[int]:
    return [int(f.id) for f in frames if f.id is not None]


async def test_runs_pause_and_resume_on_another_pod_through_pgbouncer(
    pooled_env: dict[str, str],
    procs: list[Proc],
    http: aiohttp.ClientSession,
    direct: Any,
) -> None:
    a = start_runtime(pooled_env, name="runtime-pgb-a")
    procs.append(a)
    b = start_runtime(pooled_env, name="runtime-pgb-b")
    procs.append(b)
    gw_a = start_gateway(pooled_env, a.addr, name="gateway-pgb-a")
    procs.append(gw_a)
    gw_b = start_gateway(pooled_env, b.addr, name="gateway-pgb-b")
    procs.append(gw_b)

    targets = [await abnormal_service(direct, prefix="pgb") for _ in range(4)]
    runs = [
        await new_run(http, gw_a.addr, f"restart the abnormal {service} instance")
        for service, _ in targets
    ]
    # Streams from the other pod's gateway, every run at once: reads and appends of four runs
    # and two pods interleave on POOL_SIZE server connections.
    readers = [await events(http, gw_b.addr, run_id) for run_id in runs]
    firsts = await asyncio.gather(*(r.events_until("interrupt") for r in readers))
    for first in firsts:
        assert first[-1].event == "interrupt", [f.event for f in first]

    # Far more client connections than server connections: the pooler really shares them.
    backends = await direct.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()"
    )
    listeners = 2  # one LISTEN per runtime, on the session alias
    assert backends <= POOL_SIZE + listeners, backends

    assert a.terminate() == 0  # pod A leaves: every continuation runs on pod B
    for run_id, first in zip(runs, firsts, strict=True):
        await approve(http, gw_b.addr, run_id, first[-1].json["interruptId"])
    rests = await asyncio.gather(*(r.rest(timeout=60) for r in readers))

    for (_, instance), run_id, first, rest in zip(targets, runs, firsts, rests, strict=True):
        got = first + rest
        assert got[-1].event == "done", [f.event for f in got]
        ids = dense(got)
        assert ids == list(range(1, len(ids) + 1)), ids  # every event once, in order
        assert await executions(direct, instance) == 1  # the approved restart ran once
        assert await run_status(direct, run_id) == "completed"
        stored = await direct.fetchval(
            "SELECT max(sequence) FROM run_event WHERE run_id = $1", run_id
        )
        assert stored == ids[-1]
    assert "prepared statement" not in b.log()


async def test_listen_through_the_session_dsn_wakes_a_worker(
    pooled_env: dict[str, str], procs: list[Proc], http: aiohttp.ClientSession, direct: Any
) -> None:
    env = {**pooled_env, "TETHER_POLL_INTERVAL_S": IDLE_POLL}
    rt = start_runtime(env, name="runtime-pgb-listen")
    procs.append(rt)
    gw = start_gateway(env, rt.addr, name="gateway-pgb-listen")
    procs.append(gw)
    # The first run may be found by the worker's first claim at start-up; the second is queued
    # once that worker is idle in its 600 s wait, so only a notification can wake it.
    for _ in range(2):
        service, _ = await abnormal_service(direct, prefix="pgbl")
        run_id = await new_run(http, gw.addr, f"restart the abnormal {service} instance")
        got = await (await events(http, gw.addr, run_id)).events_until("interrupt", timeout=30)
        assert got[-1].event == "interrupt", [f.event for f in got]
        await asyncio.sleep(1)  # the worker's claim after the run paused is over
    assert "polling" not in rt.log()


async def test_without_a_session_dsn_the_worker_polls(
    pooled_env: dict[str, str], procs: list[Proc], http: aiohttp.ClientSession, direct: Any
) -> None:
    env = {**pooled_env, "TETHER_DB_LISTEN_URL": "", "TETHER_POLL_INTERVAL_S": "0.5"}
    rt = start_runtime(env, name="runtime-pgb-poll")
    procs.append(rt)
    gw = start_gateway(env, rt.addr, name="gateway-pgb-poll")
    procs.append(gw)
    for _ in range(2):
        service, _ = await abnormal_service(direct, prefix="pgbp")
        run_id = await new_run(http, gw.addr, f"restart the abnormal {service} instance")
        got = await (await events(http, gw.addr, run_id)).events_until("interrupt", timeout=30)
        assert got[-1].event == "interrupt", [f.event for f in got]
    assert rt.log().count("TETHER_DB_LISTEN_URL is not set") == 1  # said once, not per tick


async def test_without_a_session_dsn_nothing_wakes_an_idle_worker(
    pooled_env: dict[str, str], procs: list[Proc], http: aiohttp.ClientSession, direct: Any
) -> None:
    """The control for the LISTEN test: the same idle worker without a session DSN leaves a new
    run queued, so what woke it there was the notification."""
    env = {**pooled_env, "TETHER_DB_LISTEN_URL": "", "TETHER_POLL_INTERVAL_S": IDLE_POLL}
    rt = start_runtime(env, name="runtime-pgb-deaf")
    procs.append(rt)
    gw = start_gateway(env, rt.addr, name="gateway-pgb-deaf")
    procs.append(gw)
    await asyncio.sleep(1)  # the worker's first claim, at start-up, is over
    service, _ = await abnormal_service(direct, prefix="pgbd")
    run_id = await new_run(http, gw.addr, f"restart the abnormal {service} instance")
    await asyncio.sleep(3)
    assert await run_status(direct, run_id) == "queued"


async def test_two_migrations_racing_through_pgbouncer_apply_each_once(
    admin_dsn: str, base_env: dict[str, str]
) -> None:
    conn = await asyncpg.connect(admin_dsn)
    name = "tether_t_pgb_" + uuid.uuid4().hex[:8]
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = stores.with_database(admin_dsn, name)
    try:
        with pgbouncer(admin_dsn, pool_size=POOL_SIZE) as b:
            env = {**base_env, "DATABASE_URL": b.url(name), "TETHER_DB_POOLER": "transaction"}
            results = await asyncio.gather(
                *(asyncio.to_thread(tether_cli, "migrate", env=env) for _ in range(2))
            )
            for r in results:
                assert r.returncode == 0, r.stderr
            seeded = await asyncio.to_thread(tether_cli, "seed-demo", env=env)
            assert seeded.returncode == 0, seeded.stderr
        check = await asyncpg.connect(dsn)
        try:
            versions = [
                r["version"] for r in await check.fetch("SELECT version FROM schema_migration")
            ]
            assert versions and len(versions) == len(set(versions))
            assert await check.fetchval("SELECT count(*) FROM inv_service") > 0
        finally:
            await check.close()
    finally:
        await stores.drop_database(admin_dsn, dsn)


async def test_the_direct_settings_break_behind_pgbouncer(
    private_env: dict[str, str], bouncer: PgBouncer
) -> None:
    """Why the pooler mode exists: what works on a direct connection fails through PgBouncer."""
    url = bouncer.url(database_of(private_env["DATABASE_URL"]))
    # A session setting in the startup packet (the runtime's idle-in-transaction limit) is
    # refused by PgBouncer outright.
    with pytest.raises(asyncpg.ProtocolViolationError, match="unsupported startup parameter"):
        await create_pool(url, min_size=1, max_size=1, idle_tx_timeout_s=3)

    async def cached_statement_again(statement_cache_size: int) -> int:
        """Run a statement, let another client take that server connection in a transaction,
        run the statement again: PgBouncer serves it on another server connection."""
        own = await asyncpg.connect(url, statement_cache_size=statement_cache_size)
        other = await asyncpg.connect(url)
        try:
            assert await own.fetchval("SELECT $1::int", 1) == 1
            async with other.transaction():
                await other.execute("SELECT 1")  # holds the server connection `own` just used
                return int(await own.fetchval("SELECT $1::int", 2))
        finally:
            await own.close()
            await other.close()

    with pytest.raises(asyncpg.InvalidSQLStatementNameError):
        await cached_statement_again(100)  # asyncpg's default: named, cached statements
    assert await cached_statement_again(0) == 2  # TETHER_DB_POOLER=transaction


async def test_the_pooler_frees_a_row_lock_held_by_a_client_idle_in_its_transaction(
    admin_dsn: str, private_env: dict[str, str], direct: Any
) -> None:
    """What replaces the pool's idle_in_transaction_session_timeout behind PgBouncer (which
    refuses it as a startup parameter): its idle_transaction_timeout cuts off a client frozen
    inside a transaction (a SIGSTOPped worker holding a run's row lock), so another worker can
    take the row over."""
    db = database_of(private_env["DATABASE_URL"])
    await direct.execute("CREATE TABLE pgb_lock (id int PRIMARY KEY)")
    await direct.execute("INSERT INTO pgb_lock VALUES (1)")
    with pgbouncer(admin_dsn, pool_size=POOL_SIZE, idle_transaction_timeout_s=1) as b:
        frozen = await asyncpg.connect(b.url(db), statement_cache_size=0)
        taker = await asyncpg.connect(b.url(db), statement_cache_size=0)
        try:
            tx = frozen.transaction()
            await tx.start()
            await frozen.execute("SELECT 1 FROM pgb_lock WHERE id = 1 FOR UPDATE")
            # Blocks until the pooler ends the idle transaction; the statement's own limit is
            # only a bound for a broken pooler, far above the pooler's 1 s.
            async with taker.transaction():
                await taker.execute("SET LOCAL lock_timeout = '20s'")
                await taker.execute("SELECT 1 FROM pgb_lock WHERE id = 1 FOR UPDATE")
            with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
                await frozen.execute("SELECT 1")  # the frozen client was cut off
        finally:
            frozen.terminate()
            await taker.close()


async def test_a_session_stalled_mid_command_behind_pgbouncer_is_found_and_ended(
    private_env: dict[str, str], bouncer: PgBouncer, direct: Any
) -> None:
    """PgBouncer passes a client's application_name on to the server connection it lends it,
    so the runtime's sweep (store/stalled_sessions.py) finds a session left mid-command through
    the pooler by the same name, and ending it ends the client's link too."""
    name = f"tether-test-{uuid.uuid4().hex[:8]}"
    stalled = StalledSession(bouncer.url(database_of(private_env["DATABASE_URL"])), name, lock=4545)
    try:
        await asyncio.sleep(1.0)
        assert (
            await direct.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
                "AND state = 'active' AND wait_event = 'ClientRead'",
                name,
            )
            == 1
        )
        assert await end_stalled(direct, name, older_than_s=0.5) == 1
        assert await asyncio.to_thread(stalled.ended, 5.0)
        assert await direct.fetchval("SELECT pg_try_advisory_lock(4545)")
        await direct.execute("SELECT pg_advisory_unlock(4545)")
    finally:
        stalled.close()
