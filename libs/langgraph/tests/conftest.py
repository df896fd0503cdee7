"""Fixtures for the LangGraph checkpointer's tests: a fresh, migrated database of each test's own
(the root conftest's `private_env`, so no shared runtime claims its runs) and a pool on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_runtime.store.db import create_pool


@pytest.fixture
def dsn(private_env: dict[str, str]) -> str:
    return private_env["DATABASE_URL"]


@pytest.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(dsn, min_size=1, max_size=4)
    yield p
    await p.close()
