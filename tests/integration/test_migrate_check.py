"""`tether migrate --check [--wait S]`, the runtime pods' init container (deploy/k8s): exit 1 on
a database without Tether's schema (or missing its latest migration), 0 once it is current;
with --wait it holds until another process migrates."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_testkit import stores
from tether_testkit.processes import tether_cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def empty_dsn(admin_dsn: str) -> AsyncIterator[str]:
    name = "tether_t_" + secrets.token_hex(6)
    conn = await asyncpg.connect(admin_dsn)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    dsn = stores.with_database(admin_dsn, name)
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


async def test_check_fails_until_migrated_then_passes(empty_dsn: str) -> None:
    env = {"DATABASE_URL": empty_dsn, "TETHER_ENV": "dev"}
    before = await asyncio.to_thread(tether_cli, "migrate", "--check", env=env)
    assert before.returncode == 1, before.stderr
    assert "not applied: 0001_" in before.stderr
    done = await asyncio.to_thread(tether_cli, "migrate", env=env)
    assert done.returncode == 0, done.stderr
    after = await asyncio.to_thread(tether_cli, "migrate", "--check", env=env)
    assert after.returncode == 0, after.stderr
    # The latest migration missing (a pod of a newer version than the Job that ran): not current.
    conn = await asyncpg.connect(empty_dsn)
    try:
        latest = await conn.fetchval(
            "DELETE FROM schema_migration WHERE version = (SELECT max(version) FROM "
            "schema_migration) RETURNING name"
        )
    finally:
        await conn.close()
    again = await asyncio.to_thread(tether_cli, "migrate", "--check", env=env)
    assert again.returncode == 1 and latest in again.stderr, again.stderr


async def test_wait_holds_until_another_process_migrates(empty_dsn: str) -> None:
    env = {"DATABASE_URL": empty_dsn, "TETHER_ENV": "dev"}
    waiting = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether_cli.main", "migrate", "--check", "--wait", "90",
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        with pytest.raises(TimeoutError):  # still waiting: nothing migrated yet
            await asyncio.wait_for(asyncio.shield(waiting.wait()), 3)
        done = await asyncio.to_thread(tether_cli, "migrate", env=env)
        assert done.returncode == 0, done.stderr
        out, err = await asyncio.wait_for(waiting.communicate(), 60)
        assert waiting.returncode == 0, err.decode()
        assert "the schema is current" in out.decode()
    finally:
        if waiting.returncode is None:
            waiting.kill()
            await waiting.wait()
