"""Fixtures for the mailer's tests: a database of each test's own with the mailer's tables and
demo customers (its migrations and seed, applied as `tether migrate` / `tether seed-demo` do when
TETHER_AGENTS names it), alice's grant to email any segment, and a real SMTP sink on a free port
of this test's event loop. The root conftest gives the stores (admin_dsn, base_env)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_mailer.sink import Sink, bound_port, serve_smtp
from tether_testkit import stores

MAILER_ENV = {"TETHER_AGENTS": "tether_mailer:agent"}


@pytest.fixture
async def mailer_dsn(admin_dsn: str) -> AsyncIterator[str]:
    from tether_runtime.store import grants

    dsn = await stores.create_fresh_database(admin_dsn, {**os.environ, **MAILER_ENV})
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", "email.send", "segment/*")
    finally:
        await conn.close()
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
async def db(mailer_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(mailer_dsn)
    yield conn
    await conn.close()


class SmtpSink:
    def __init__(self, sink: Sink, port: int) -> None:
        self.sink = sink
        self.port = port


@pytest.fixture
async def sink() -> AsyncIterator[SmtpSink]:
    handler = Sink()
    server = await serve_smtp(handler, "127.0.0.1", 0)
    yield SmtpSink(handler, bound_port(server))
    handler.release.set()
    server.close()
    await server.wait_closed()


@pytest.fixture
def env(base_env: dict[str, str], mailer_dsn: str, sink: SmtpSink) -> dict[str, str]:
    """For a runtime process that loads the mailer and sends to the sink."""
    return {
        **base_env,
        **MAILER_ENV,
        "DATABASE_URL": mailer_dsn,
        "MAILER_SMTP_HOST": "127.0.0.1",
        "MAILER_SMTP_PORT": str(sink.port),
    }
