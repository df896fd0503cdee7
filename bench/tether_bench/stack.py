"""The system under test: a fresh database on the admin Postgres, one runtime and one gateway as
real processes (the approach of tests/tether_testkit/processes.py, asyncio edition), each on a
free 127.0.0.1 port with its own log file. `fork=True` (the quick mode, whose figures nobody
judges) forks them from a warm parent (tether_cli.forkserver) instead of starting each cold: its
frozen heap changes how the collector works, so measured figures come from cold starts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether_cli import forkserver

LOG_DIR = Path(os.environ.get("TETHER_BENCH_LOG_DIR", tempfile.gettempdir())) / "tether-bench-logs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path="/" + name))


async def create_database(admin_dsn: str) -> tuple[str, str]:
    """A fresh database, migrated and seeded with the demo; returns (dsn, server version)."""
    from tether_runtime.provision import prepare

    name = "tether_bench_" + secrets.token_hex(5)
    conn = await asyncpg.connect(admin_dsn)
    try:
        version = str(await conn.fetchval("SHOW server_version"))
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    dsn = with_database(admin_dsn, name)
    await prepare(dsn)
    return dsn, version


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


class Forked:
    """A process forked by tether_cli.forkserver, with the few methods of
    asyncio.subprocess.Process the bench uses."""

    def __init__(self, proc: forkserver.ForkedProcess) -> None:
        self._proc = proc

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def send_signal(self, sig: int) -> None:
        self._proc.send_signal(sig)

    def kill(self) -> None:
        self._proc.kill()

    async def wait(self) -> int:
        """Its exit status, asked of the fork server (which reaps it) in a worker thread."""
        return await asyncio.to_thread(self._proc.wait)


@dataclass
class Proc:
    name: str
    proc: asyncio.subprocess.Process | Forked
    addr: str
    log_path: Path
    metrics_url: str = ""  # a runtime's Prometheus endpoint

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def alive(self) -> bool:
        return self.proc.returncode is None

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""

    async def stop(self, limit_s: float = 30) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), limit_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()


def _log_file(name: str) -> tuple[Path, BinaryIO]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{name}-{os.getpid()}-{time.time_ns()}.log"
    return log_path, open(log_path, "wb")  # noqa: SIM115 - closed by the caller


async def _spawn(
    name: str, args: list[str], env: dict[str, str], addr: str, *, fork: bool = False
) -> Proc:
    log_path, log = _log_file(name)
    if fork and args[0] == "-m":
        log.close()
        forked = await asyncio.to_thread(
            forkserver.spawn, args[1], args[2:], {**os.environ, **env}, log_path
        )
        return Proc(name, Forked(forked), addr, log_path)
    with log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *args, env={**os.environ, **env}, stdout=log, stderr=log
        )
    return Proc(name, proc, addr, log_path)


async def _grpc_serving(addr: str) -> bool:
    try:
        async with grpc.aio.insecure_channel(addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            resp = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
            return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False


async def _http_ready(url: str) -> bool:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.5)) as s,
            s.get(url + "/readyz") as resp,
        ):
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def _wait_ready(proc: Proc, check: object, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(
                f"{proc.name} exited with {proc.proc.returncode}:\n{proc.log_tail()}"
            )
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    await proc.stop(5)
    raise TimeoutError(f"{proc.name} not ready in {limit_s}s:\n{proc.log_tail()}")


async def start_runtime(
    env: dict[str, str],
    limit_s: float = 30,
    *,
    name: str = "runtime",
    processes: int = 1,
    fork: bool = False,
) -> Proc:
    """One runtime process, or with `processes` > 1 a pod of that many behind one port (`tether
    runtime --processes N`: a supervisor, its children, their metrics merged on one port)."""
    addr = f"127.0.0.1:{free_port()}"
    # its metrics on a port of their own: the bench reads tether_db_statements_total there
    metrics = f"127.0.0.1:{free_port()}"
    argv = ["-m", "tether_runtime"]
    if processes > 1:
        argv = ["-m", "tether_cli.main", "runtime", "--processes", str(processes)]
    proc = await _spawn(
        name,
        argv,
        {**env, "TETHER_GRPC_ADDR": addr, "TETHER_METRICS_ADDR": metrics},
        addr,
        fork=fork,
    )
    proc.metrics_url = f"http://{metrics}/metrics"
    await _wait_ready(proc, lambda: _grpc_serving(addr), limit_s)
    return proc


async def start_gateway(
    env: dict[str, str], runtime_addr: str, limit_s: float = 30, *, fork: bool = False
) -> Proc:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = await _spawn(
        "gateway",
        ["-m", "tether_cli.main", "gateway"],
        {**env, "TETHER_HTTP_ADDR": f"127.0.0.1:{port}", "TETHER_RUNTIME_TARGET": runtime_addr},
        url,
        fork=fork,
    )
    await _wait_ready(proc, lambda: _http_ready(url), limit_s)
    return proc


def testkit_on_path() -> None:
    """Make the test kit (tests/tether_testkit) importable: the bench uses its recipes rather
    than second copies of them."""
    tests = str(Path(__file__).resolve().parents[2] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)


@contextlib.contextmanager
def redis_cluster() -> Iterator[str]:
    """`--redis cluster`: a Redis Cluster of three masters with one replica each on free ports,
    started by the test kit's recipe (one recipe for the tests and the bench), stopped at the
    end. Yields the REDIS_URL that names it."""
    testkit_on_path()
    from tether_testkit.redis_cluster import redis_cluster as started

    with started() as nodes:
        yield nodes.url
