"""Fixtures of the runtime's own tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether_runtime.store.db import create_pool


@pytest.fixture
async def pool(private_env: dict[str, str]) -> AsyncIterator[Any]:
    """The runtime's pool on the test's private database (migrated, seeded)."""
    p = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    yield p
    await p.close()
