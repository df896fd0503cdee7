"""The embedded stores: a real server each, reachable over TCP by other processes, data kept
between starts, nothing left running after stop (also as root, where Postgres runs unprivileged)."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from tether_cli.embedded import EmbeddedPostgres, EmbeddedRedis
from tether_cli.embedded.postgres import POSTGRES_BIN_PATH

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


def _psql(dsn: str, sql: str) -> str:
    """Another process using the DSN, as the services do."""
    out = subprocess.run(
        [str(POSTGRES_BIN_PATH / "psql"), "-X", "-tA", dsn, "-c", sql],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_postgres_serves_keeps_data_and_stops(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg")
    pg.start()
    try:
        dsn = pg.create_database("tether")
        assert pg.create_database("tether") == dsn  # idempotent
        _psql(dsn, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('yes')")
        data = _psql(dsn, "SELECT current_setting('data_directory')")
        assert Path(data) == tmp_path / "pg" / "pgdata"
        if os.geteuid() == 0:  # Postgres refuses root: it runs as an unprivileged account
            server = pg.process
            assert server is not None
            uid = int(Path(f"/proc/{server.pid}/status").read_text().split("Uid:")[1].split()[0])
            assert pwd.getpwuid(uid).pw_name != "root"
    finally:
        pg.stop()
    port = pg.port
    assert pg.process is None and not _listening(port)

    again = EmbeddedPostgres(tmp_path / "pg")
    again.start()
    try:
        dsn = again.create_database("tether")
        assert _psql(dsn, "SELECT v FROM kept") == "yes"
    finally:
        again.stop()


def test_postgres_replaces_a_leftover_server(tmp_path: Path) -> None:
    """A `tether dev` killed with SIGKILL leaves its postmaster; the next start takes over."""
    first = EmbeddedPostgres(tmp_path / "pg")
    first.start()
    orphan = first.process
    assert orphan is not None
    first._proc = None  # forget it, as a killed parent would
    second = EmbeddedPostgres(tmp_path / "pg")
    try:
        second.start()
        assert orphan.wait(30) is not None
        assert _psql(second.dsn, "SELECT 1") == "1"
    finally:
        second.stop()
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


async def test_redis_is_reachable_over_tcp_and_stops(tmp_path: Path) -> None:
    rd = EmbeddedRedis(tmp_path / "redis")
    url = rd.start()
    try:
        client = aioredis.from_url(url)
        try:
            await client.set("k", "v")
            assert await client.get("k") == b"v"
        finally:
            await client.aclose()
    finally:
        rd.stop()
    assert rd.process is None and not _listening(rd.port)
