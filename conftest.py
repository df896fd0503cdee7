"""Session fixtures: real Postgres and Redis (environment, testcontainers, or embedded), a fresh
migrated and seeded database per session, and the environment for Tether processes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from tether_testkit import stores
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    with stores.postgres_admin_dsn() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with stores.redis_url() as url:
        yield url


@pytest.fixture(scope="session")
def database_url(admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield dsn
    asyncio.run(stores.drop_database(admin_dsn, dsn))


@pytest.fixture(scope="session")
def base_env(database_url: str, redis_url: str) -> dict[str, str]:
    """Environment for every Tether process a test starts."""
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "TETHER_JWT_SECRET": TEST_SECRET,
        "TETHER_ENV": "dev",
        # The suites' runs that name no agent are OpsPilot's, also beside another loaded agent
        # (the core configuration names no agent: TETHER_DEFAULT_AGENT is empty by default).
        "TETHER_DEFAULT_AGENT": "opspilot",
        "TETHER_SCRIPTED_DELAY_S": "0.002",
        "TETHER_LEASE_TTL_S": "3",
        "TETHER_POLL_INTERVAL_S": "0.5",
        "TETHER_STREAM_QUIET_CHECK_S": "0.5",
        "TETHER_DRAIN_S": "4",
        # Every process of the suite shares one Postgres, whose default is 100 connections: a
        # runtime's pool of 20 (the production default) grows to it under a burst of runs and
        # keeps it while idle, and four workers' runtimes (each also with OpsPilot's pool of 10)
        # took them all.
        "TETHER_DB_POOL_SIZE": "8",
        "TETHER_LOG_LEVEL": "INFO",
        # Per-user limits count in the shared Redis for the whole session: tests that are not
        # about them must not spend one budget (tests/integration/security sets its own).
        "TETHER_RATE_LIMIT_PER_MIN": "0",
        "TETHER_MAX_STREAMS_PER_USER": "0",
    }


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Every process a test starts (append it); whatever is still alive at the end is killed."""
    started: list[Proc] = []
    yield started
    for p in started:
        p.kill()


@pytest.fixture(scope="session")
def runtime(base_env: dict[str, str]) -> Iterator[Proc]:
    """One shared runtime process for tests that don't kill it."""
    proc = start_runtime(base_env, name="runtime-shared")
    yield proc
    proc.terminate()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[object]:
    import asyncpg

    conn = await asyncpg.connect(database_url)
    yield conn
    await conn.close()


@pytest.fixture
def private_env(admin_dsn: str, base_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A fresh database of its own, for tests that decide exactly which processes may work on it
    (the shared `runtime` would otherwise claim its runs, as any pod would)."""
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield {**base_env, "DATABASE_URL": dsn}
    asyncio.run(stores.drop_database(admin_dsn, dsn))


@pytest.fixture
async def private_db(private_env: dict[str, str]) -> AsyncIterator[object]:
    import asyncpg

    conn = await asyncpg.connect(private_env["DATABASE_URL"])
    yield conn
    await conn.close()


def _weight(item: pytest.Item) -> tuple[int, float]:
    """How early a test's file should start: slow tests first, the longest of them first (the
    seconds a file's `slow` mark states, its wall time in `make test`), then the ones that start
    processes, then the rest (quick unit tests fill the end)."""
    slow = item.get_closest_marker("slow")
    if slow is not None:
        return 0, -float(slow.kwargs.get("seconds", 0))
    if item.get_closest_marker("process"):
        return 1, 0.0
    return 2, 0.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with slow tests go first, the longest first. `make test` hands whole files to its
    workers in collection order, so a long file collected last ran alone at the end while the
    other workers sat idle; files keep their own order of tests."""
    first: dict[str, tuple[int, float]] = {}
    for item in items:
        path = str(item.path)
        first[path] = min(first.get(path, (2, 0.0)), _weight(item))
    order = {path: rank for rank, path in enumerate(sorted(first, key=lambda p: first[p]))}
    items.sort(key=lambda item: order[str(item.path)])


_SESSION_START = [0.0]


def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    _SESSION_START[0] = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The side-by-side tables tests wrote this session (tether_testkit.reports)."""
    from tether_testkit import reports

    if hasattr(terminalreporter.config, "workerinput"):
        return  # an xdist worker: the controller prints them
    for doc in reports.since(_SESSION_START[0]):
        terminalreporter.write_sep("-", doc["title"])
        for line in reports.render(doc):
            terminalreporter.write_line(line)


@pytest.fixture
def netns_required() -> None:
    """The network-fault tests need root, `ip` and `nft` (`make test` installs nftables): on a
    machine without them they fail saying what is missing, never skip."""
    from tether_testkit.netns import available

    why = available()
    if why:
        pytest.fail(f"this test puts processes on network namespaces of their own: {why}")
