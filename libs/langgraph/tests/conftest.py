"""Fixtures for the LangGraph checkpointer's tests: a fresh, migrated database per test module
(`dsn`, `pool`: tests there keep to threads of their own), and one per test (`private_pool`) for
the tests that claim runs, so no other test's run and no shared runtime is ever claimable
there."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_runtime.store.db import create_pool
from tether_testkit import stores


@pytest.fixture(scope="module")
async def dsn(admin_dsn: str) -> AsyncIterator[str]:
    fresh = await stores.create_fresh_database(admin_dsn)
    yield fresh
    await stores.drop_database(admin_dsn, fresh)


@pytest.fixture(scope="module")
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(dsn, min_size=1, max_size=4)
    yield p
    await p.close()


@pytest.fixture
async def private_pool(private_env: dict[str, str]) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    yield p
    await p.close()
