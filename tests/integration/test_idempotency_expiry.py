"""Idempotency keys expire after TETHER_IDEMPOTENCY_TTL_S (issue 18): within the window a retry
is answered with the first run; past it the key is free (a new run, the stored answer replaced),
and the runtime's cleanup deletes expired keys while keeping fresh ones. The cleanup is safe to
run from any number of pods at once: concurrent batches skip each other's rows."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_testkit.client import Client, token
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TTL_S = 3600


@pytest.fixture
async def env(private_env: dict[str, str]) -> dict[str, str]:
    return {**private_env, "TETHER_IDEMPOTENCY_TTL_S": str(TTL_S), "TETHER_POLL_INTERVAL_S": "0.5"}


@pytest.fixture
async def db(env: dict[str, str]) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(env["DATABASE_URL"])
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    yield conn
    await conn.close()


async def _age(db: asyncpg.Connection, key: str, seconds: float) -> None:
    await db.execute(
        "UPDATE idempotency_key SET created_at = now() - make_interval(secs => $2) WHERE key = $1",
        key,
        seconds,
    )


async def test_a_key_answers_within_its_window_and_is_free_after_it(
    env: dict[str, str], procs: list[Proc], db: asyncpg.Connection
) -> None:
    runtime = start_runtime(env, name="rt-idem")
    procs.append(runtime)
    c = Client(runtime.addr, token(TEST_SECRET, f"idem-{uuid.uuid4().hex[:8]}"))
    try:
        conv = await c.conversation()
        key = uuid.uuid4().hex
        first = await c.start(conv, "stream 2 deltas", key)
        await c.events(first.run.id)
        await _age(db, key, TTL_S - 120)  # near the end of its window: still answers
        again = await c.start(conv, "stream 2 deltas", key)
        assert again.replayed and again.run.id == first.run.id
        await _age(db, key, TTL_S + 120)  # past it: the key is free
        later = await c.start(conv, "stream 2 deltas", key)
        assert not later.replayed and later.run.id != first.run.id
        stored = await db.fetchrow(
            "SELECT response, created_at > now() - interval '1 minute' AS fresh "
            "FROM idempotency_key WHERE key = $1",
            key,
        )
        assert stored["response"]["run"]["id"] == later.run.id and stored["fresh"]
        # And the new answer is what a retry now gets.
        retry = await c.start(conv, "stream 2 deltas", key)
        assert retry.replayed and retry.run.id == later.run.id
    finally:
        await c.close()


async def test_the_runtime_deletes_expired_keys_and_keeps_fresh_ones(
    env: dict[str, str], procs: list[Proc], db: asyncpg.Connection
) -> None:
    tag = uuid.uuid4().hex[:8]
    for n in range(30):
        await db.execute(
            "INSERT INTO idempotency_key (scope, key, request_hash, response, created_at) "
            "VALUES ($1, $2, 'h', '{}'::jsonb, now() - make_interval(secs => $3))",
            f"start:{tag}",
            f"{tag}-{n}",
            # Ten fresh, twenty expired.
            60.0 if n < 10 else TTL_S + 60.0 * n,
        )
    runtime = start_runtime(env, name="rt-idem-clean")
    procs.append(runtime)
    deadline = time.monotonic() + 30
    while (
        await db.fetchval("SELECT count(*) FROM idempotency_key WHERE scope = $1", f"start:{tag}")
        > 10
    ):
        assert time.monotonic() < deadline, "the expired keys were never deleted"
        await asyncio.sleep(0.2)
    kept = await db.fetch(
        "SELECT key FROM idempotency_key WHERE scope = $1 ORDER BY key", f"start:{tag}"
    )
    assert sorted(r["key"] for r in kept) == sorted(f"{tag}-{n}" for n in range(10))


async def test_concurrent_cleanups_share_the_work_without_waiting_or_failing(
    env: dict[str, str], db: asyncpg.Connection
) -> None:
    from tether_runtime.store import idempotency

    tag = uuid.uuid4().hex[:8]
    await db.execute(
        "INSERT INTO idempotency_key (scope, key, request_hash, response, created_at) "
        "SELECT $1, $1 || '-' || n, 'h', '{}'::jsonb, now() - make_interval(secs => $2) "
        "FROM generate_series(1, 500) n",
        f"sweep:{tag}",
        TTL_S + 600.0,
    )
    idempotency.configure(TTL_S)
    conns = [await asyncpg.connect(env["DATABASE_URL"]) for _ in range(4)]
    try:
        # Four "pods", each deleting batches of 50 until nothing is left for it.
        async def pod(conn: asyncpg.Connection) -> int:
            total = 0
            while n := await idempotency.delete_expired(conn, batch=50):
                total += n
            return total

        deleted = await asyncio.gather(*(pod(c) for c in conns))
    finally:
        idempotency.configure(idempotency.DEFAULT_TTL_S)
        for c in conns:
            await c.close()
    assert (
        await db.fetchval("SELECT count(*) FROM idempotency_key WHERE scope = $1", f"sweep:{tag}")
        == 0
    )
    assert sum(deleted) >= 500
