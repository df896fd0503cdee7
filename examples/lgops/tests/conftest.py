"""Fixtures for the LangGraph ops example: a database of each test's own with the example's
tables and services (its migrations and seed, as `tether migrate` / `tether seed-demo` apply them
when TETHER_AGENTS names it), alice's grant to restart any service, and a fake OpenAI server the
graph's ChatOpenAI talks to (the model is scripted by what it is sent)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import asyncpg
import pytest
from lgops_brain import ops_brain
from tether_testkit import stores
from tether_testkit.fake_openai import FakeOpenAI

LGOPS_ENV = {"TETHER_AGENTS": "tether_lgops:agent"}


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(brain=ops_brain) as server:
        yield server  # type: ignore[misc]


@pytest.fixture
async def lgops_dsn(admin_dsn: str) -> AsyncIterator[str]:
    from tether_runtime.store import grants

    dsn = await stores.create_fresh_database(admin_dsn, {**os.environ, **LGOPS_ENV})
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", "service.restart", "*")
    finally:
        await conn.close()
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
async def db(lgops_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(lgops_dsn)
    yield conn
    await conn.close()


@pytest.fixture
def env(base_env: dict[str, str], lgops_dsn: str, llm: FakeOpenAI) -> dict[str, str]:
    """For a runtime process that loads the LangGraph example and talks to the fake model."""
    return {
        **base_env,
        **LGOPS_ENV,
        "DATABASE_URL": lgops_dsn,
        "TETHER_OPENAI_BASE_URL": llm.base_url,
        "TETHER_OPENAI_API_KEY": "sk-test-lgops",
    }
