"""Where tests find Postgres and Redis: the environment first, then testcontainers where a Docker
engine answers, then the embedded servers (DESIGN section 8). Every session gets a fresh database,
copied from a template database (templates.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tether_testkit import templates
from tether_testkit.no_processes import store_processes


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False


@contextlib.contextmanager
def postgres_admin_dsn() -> Iterator[str]:
    """A DSN with the right to create databases; the template databases this process made on
    its server are dropped when it is given up."""
    with _postgres_server() as dsn:
        try:
            yield dsn
        finally:
            asyncio.run(templates.drop_all(dsn))


@contextlib.contextmanager
def _postgres_server() -> Iterator[str]:
    env = os.environ.get("TETHER_TEST_DATABASE_URL")
    if env:
        yield env
        return
    with store_processes():
        in_docker = _docker_answers()
    if in_docker:
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
        return
    from tether_cli.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="tether-test-pg-") as folder:
        server = EmbeddedPostgres(folder)
        with store_processes():
            dsn = server.start()
        try:
            yield dsn
        finally:
            with store_processes():
                server.stop()


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    env = os.environ.get("TETHER_TEST_REDIS_URL")
    if env:
        yield env
        return
    with store_processes():
        in_docker = _docker_answers()
    if in_docker:
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7-alpine") as rc:
            yield f"redis://{rc.get_container_host_ip()}:{rc.get_exposed_port(6379)}/0"
        return
    from tether_cli.embedded import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="tether-test-redis-") as folder:
        server = EmbeddedRedis(folder)
        with store_processes():
            url = server.start()
        try:
            yield url
        finally:
            with store_processes():
                server.stop()


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


async def create_fresh_database(admin_dsn: str, *then: Mapping[str, str]) -> str:
    """A new database, migrated and seeded as `provision.prepare(dsn)` leaves one with this
    process's environment, then `prepare(dsn, config)` with each of `then` in turn: a copy of
    this process's template for them (templates.py). Its DSN."""
    return with_database(admin_dsn, await templates.fresh(admin_dsn, (None, *then)))


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
