"""Where tests find Postgres and Redis: the environment first, then testcontainers where a Docker
engine answers, then the embedded servers (DESIGN section 8). Every session gets a fresh database."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False


@contextlib.contextmanager
def postgres_admin_dsn() -> Iterator[str]:
    """A DSN with the right to create databases."""
    env = os.environ.get("TETHER_TEST_DATABASE_URL")
    if env:
        yield env
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
        return
    from tether_cli.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="tether-test-pg-") as folder:
        server = EmbeddedPostgres(folder)
        dsn = server.start()
        try:
            yield dsn
        finally:
            server.stop()


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    env = os.environ.get("TETHER_TEST_REDIS_URL")
    if env:
        yield env
        return
    if _docker_answers():
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7-alpine") as rc:
            yield f"redis://{rc.get_container_host_ip()}:{rc.get_exposed_port(6379)}/0"
        return
    from tether_cli.embedded import EmbeddedRedis

    with tempfile.TemporaryDirectory(prefix="tether-test-redis-") as folder:
        server = EmbeddedRedis(folder)
        url = server.start()
        try:
            yield url
        finally:
            server.stop()


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


async def create_fresh_database(admin_dsn: str) -> str:
    """Create an empty database for this session, migrate it, seed the demo; return its DSN."""
    from tether_runtime.provision import prepare

    name = "tether_t_" + secrets.token_hex(6)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    dsn = with_database(admin_dsn, name)
    await prepare(dsn)
    return dsn


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
