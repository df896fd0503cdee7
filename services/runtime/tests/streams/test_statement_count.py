"""tether_db_statements_total: every round trip of the runtime's pool is counted once, by kind,
whichever asyncpg call sent it."""

from __future__ import annotations

from prometheus_client import REGISTRY
from tether_runtime import metrics  # noqa: F401 - registers the collector
from tether_runtime.store import statement_count
from tether_runtime.store.db import create_pool


def scraped() -> dict[str, float]:
    out: dict[str, float] = {}
    for family in REGISTRY.collect():
        if family.name == "tether_db_statements":
            for sample in family.samples:
                if sample.name == "tether_db_statements_total":
                    out[sample.labels["kind"]] = sample.value
    return out


def test_kind_is_the_first_keyword() -> None:
    assert statement_count.kind_of("  SELECT 1") == "select"
    assert statement_count.kind_of("\n(SELECT 1) UNION (SELECT 2)") == "select"
    assert statement_count.kind_of("WITH x AS (SELECT 1) UPDATE run SET id = id") == "with"
    assert statement_count.kind_of("insert into t values (1)") == "insert"
    assert statement_count.kind_of("LISTEN tether_runs") == "other"
    assert statement_count.kind_of("") == "other"
    assert statement_count.kind_of("BEGIN;") == "begin"


async def test_each_call_counts_once_by_kind(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            before = scraped()
            await conn.fetchval("SELECT 1")
            await conn.fetchrow("SELECT $1::int", 2)
            await conn.fetch("SELECT generate_series(1, $1)", 3)
            await conn.execute("CREATE TEMP TABLE IF NOT EXISTS sc (x int)")
            await conn.execute("INSERT INTO sc VALUES ($1)", 1)
            await conn.executemany("INSERT INTO sc VALUES ($1)", [(2,), (3,)])
            async with conn.transaction():  # BEGIN and COMMIT are round trips too
                await conn.execute("UPDATE sc SET x = x + 1")
            await conn.execute("DELETE FROM sc WHERE x > $1", 10)
        await pool.fetchval("SELECT 1")  # the pool's shortcuts use the same connections
        after = scraped()
    finally:
        await pool.close()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert {k: v for k, v in delta.items() if v} == {
        "select": 4,
        "other": 1,
        "insert": 2,
        "update": 1,
        "begin": 1,
        "commit": 1,
        "delete": 1,
    }
