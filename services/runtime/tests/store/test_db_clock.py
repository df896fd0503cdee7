"""Postgres's clock as a process reads it for a card's expiry (db.DbClock): one `SELECT now()`
per resync period, and in between that reading moved on by this process's monotonic time; it
never runs ahead of Postgres, and is behind by no more than a reading's round trip."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from tether_runtime.store.db import DbClock, db_now
from tether_runtime.store.statement_count import COUNTS


async def test_one_reading_a_period_and_postgres_time_in_between(pool: Any) -> None:
    clock = DbClock(pool, resync_s=0.5)
    before = sum(COUNTS.values())
    low = await db_now(pool)
    first = await clock.now()
    await asyncio.sleep(0.1)
    second = await clock.now()
    high = await db_now(pool)
    assert sum(COUNTS.values()) - before == 3  # the two references and one reading
    assert low <= first <= second <= high
    assert second - first >= timedelta(seconds=0.1)

    await asyncio.sleep(0.5)  # past the period: read again
    before = sum(COUNTS.values())
    third = await clock.now()
    assert sum(COUNTS.values()) - before == 1
    assert third >= second + timedelta(seconds=0.5)
    assert abs((await db_now(pool)) - third) < timedelta(seconds=1)
