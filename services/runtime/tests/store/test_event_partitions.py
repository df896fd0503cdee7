"""run_event partitioned by the time in its run ids, with retention (migration 0019,
store/event_partitions.py), on databases no runtime works on: the conversion keeps an existing
log, the job makes days ahead and drops only what is wholly past retention and finished, two
callers at once change it once, and rows the default partition took move out of it."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import asyncpg
import pytest
from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, event_partitions
from tether_runtime.store.db import create_pool
from tether_runtime.store.migrations import _read, migrate
from tether_testkit import stores
from tether_testkit.dated_runs import partition_of, run_minted_at

DAY = dt.timedelta(days=1)


@pytest.fixture
async def store(private_env: dict[str, str]) -> AsyncIterator[Any]:
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=1)
    async with pool.acquire() as conn:
        yield conn
    await pool.close()


async def _now(conn: Any) -> dt.datetime:
    value: dt.datetime = await conn.fetchval("SELECT now()")
    return value


async def _conv(conn: Any) -> str:
    return (await conversations.create(conn, "alice", "retention")).id


async def _events(conn: Any, run_id: str) -> list[int]:
    return [s for s, _ in await event_log.read_after(conn, run_id, 0, 100)]


def _contiguous(parts: list[event_partitions.Partition]) -> bool:
    return parts[0].lo is None and all(a.hi == b.lo for a, b in zip(parts, parts[1:], strict=False))


async def test_the_sql_bound_is_the_prefix_new_id_mints(store: Any) -> None:
    """Partition bounds come from tether_id_floor, ids from tether_common.ids: they must agree."""
    before = str(await store.fetchval("SELECT tether_id_floor('run', clock_timestamp())"))
    minted = new_id("run")
    after = str(
        await store.fetchval("SELECT tether_id_floor('run', clock_timestamp() + interval '1 ms')")
    )
    assert before <= minted < after
    assert await store.fetchval("SELECT $1 < $2 AND $2 < $3", before, minted, after)


async def test_conversion_keeps_an_existing_log_as_the_first_partition(admin_dsn: str) -> None:
    name = "tether_t_" + secrets.token_hex(6)
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    dsn = stores.with_database(admin_dsn, name)
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            await _convert_and_check(conn, dsn)
    finally:
        await pool.close()
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def _convert_and_check(conn: Any, dsn: str) -> None:
    # The schema as it was before 0019, with a run and its log in it.
    await conn.execute(
        "CREATE TABLE schema_migration (version integer PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for version, file, sql in _read(resources.files("tether_runtime.store") / "migrations"):
        if version < 19:
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migration VALUES ($1, $2)", version, file)
    conv = await _conv(conn)
    old, last = await run_minted_at(conn, None, conv, deltas=4)
    assert await conn.fetchval("SELECT relkind FROM pg_class WHERE relname = 'run_event'") == b"r"

    assert (await migrate(dsn))[0] == "0019_run_event_partitions.sql"  # then the later ones

    assert await _events(conn, old) == list(range(1, last + 1))
    assert await partition_of(conn, old) == "run_event_legacy"
    parts = await event_partitions.partitions(conn)
    assert parts[0].name == "run_event_legacy" and _contiguous(parts)
    # A run minted now lands in today's partition; an id of no known shape in the default.
    new, _ = await run_minted_at(conn, await _now(conn), conv)
    today = (await _now(conn)).astimezone(dt.UTC).strftime("%Y%m%d")
    assert await partition_of(conn, new) == f"run_event_p{today}"
    await event_log.insert(conn, "zz_not_an_id", 1, [ev.done("m")])
    assert await partition_of(conn, "zz_not_an_id") == "run_event_default"


async def test_the_job_makes_days_ahead_and_a_second_turn_changes_nothing(store: Any) -> None:
    now = await _now(store)
    first = await event_partitions.maintain(store, 0, now=now + 5 * DAY)
    assert first.ran and not first.dropped
    days = [(now + k * DAY).astimezone(dt.UTC).strftime("%Y%m%d") for k in range(3, 8)]
    assert first.created == [f"run_event_p{d}" for d in days]
    parts = await event_partitions.partitions(store)
    assert _contiguous(parts)
    end = str(await store.fetchval("SELECT tether_id_floor('run', $1)", now + 9 * DAY))
    assert parts[-1].hi <= end
    again = await event_partitions.maintain(store, 0, now=now + 5 * DAY)
    assert again.ran and again.created == [] and again.dropped == []
    assert await event_partitions.partitions(store) == parts


async def test_retention_drops_only_partitions_wholly_past_it(store: Any) -> None:
    now = await _now(store)
    await event_partitions.maintain(store, 0, now=now + 10 * DAY)  # days up to now + 13
    conv = await _conv(store)
    old, _ = await run_minted_at(store, now + 2 * DAY, conv)
    kept, kept_last = await run_minted_at(store, now + 5 * DAY, conv)
    assert await event_partitions.horizon(store) == ""

    # Ten days on, with 7 days of retention: the partitions that end by now + 3 days go (the
    # one of now + 2 days ends at midnight before it), the one of now + 3 days stays.
    turn = await event_partitions.maintain(store, 7 * 86400, now=now + 10 * DAY)
    day2 = (now + 2 * DAY).astimezone(dt.UTC).strftime("%Y%m%d")
    assert turn.dropped[0] == "run_event_legacy" and turn.dropped[-1] == f"run_event_p{day2}"
    assert turn.kept_for is None
    assert await _events(store, old) == []
    assert await _events(store, kept) == list(range(1, kept_last + 1))
    assert await event_partitions.events_expired(store, old)
    assert not await event_partitions.events_expired(store, kept)
    parts = await event_partitions.partitions(store)
    assert await event_partitions.horizon(store) == parts[0].lo
    assert all(a.hi == b.lo for a, b in zip(parts, parts[1:], strict=False))
    # The run's row (its state, GetRun's answer) stays; only its log is gone.
    assert await store.fetchval("SELECT status FROM run WHERE id = $1", old) == "completed"

    again = await event_partitions.maintain(store, 7 * 86400, now=now + 10 * DAY)
    assert again.dropped == [] and again.created == []


async def test_a_partition_holding_an_unfinished_run_waits_for_it(store: Any) -> None:
    now = await _now(store)
    await event_partitions.maintain(store, 0, now=now + 10 * DAY)
    conv = await _conv(store)
    paused, _ = await run_minted_at(store, now + DAY, await _conv(store), status="interrupted")
    after, _ = await run_minted_at(store, now + 2 * DAY, conv)

    turn = await event_partitions.maintain(store, 86400, now=now + 10 * DAY)
    day1 = (now + DAY).astimezone(dt.UTC).strftime("%Y%m%d")
    assert turn.kept_for == paused
    assert f"run_event_p{day1}" not in turn.dropped and turn.dropped  # the older ones went
    assert await _events(store, paused) and await _events(store, after)
    assert not await event_partitions.events_expired(store, paused)
    assert not await event_partitions.events_expired(store, after)

    await store.execute("UPDATE run SET status = 'cancelled' WHERE id = $1", paused)
    turn = await event_partitions.maintain(store, 86400, now=now + 10 * DAY)
    assert turn.kept_for is None and f"run_event_p{day1}" in turn.dropped
    assert await _events(store, paused) == [] and await _events(store, after) == []
    assert await event_partitions.events_expired(store, after)


async def test_two_pods_at_once_change_it_once(store: Any, private_env: dict[str, str]) -> None:
    import asyncio

    now = await _now(store)
    pool = await create_pool(private_env["DATABASE_URL"], min_size=3, max_size=3)
    others = [await pool.acquire() for _ in range(3)]
    try:
        for _ in range(2):  # creating days, then creating more and dropping some
            turns = await asyncio.gather(
                *(event_partitions.maintain(c, 3 * 86400, now=now + 8 * DAY) for c in others)
            )
            now += 4 * DAY
            created = [n for t in turns for n in t.created]
            dropped = [n for t in turns for n in t.dropped]
            assert len(created) == len(set(created)) and len(dropped) == len(set(dropped))
            assert any(t.ran for t in turns)
        parts = await event_partitions.partitions(store)
        assert all(a.hi == b.lo for a, b in zip(parts, parts[1:], strict=False))
        last = await event_partitions.maintain(store, 3 * 86400, now=now + 4 * DAY)
        assert last.created == [] and last.dropped == []
    finally:
        for c in others:
            await pool.release(c)
        await pool.close()


async def test_rows_the_default_partition_took_move_into_their_day(store: Any) -> None:
    now = await _now(store)
    conv = await _conv(store)
    # Past the days made ahead (a pod's clock far ahead, or the job down for days).
    early, last = await run_minted_at(store, now + 6 * DAY, conv)
    assert await partition_of(store, early) == "run_event_default"
    turn = await event_partitions.maintain(store, 0, now=now + 5 * DAY)
    day6 = (now + 6 * DAY).astimezone(dt.UTC).strftime("%Y%m%d")
    assert turn.moved == last
    assert await partition_of(store, early) == f"run_event_p{day6}"
    assert await _events(store, early) == list(range(1, last + 1))
    assert await store.fetchval("SELECT count(*) FROM run_event_default") == 0
