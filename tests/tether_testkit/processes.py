"""Real Tether processes for tests: each on its own free port, with its own log file, killable.
The runtime, the gateway and `tether` commands are forked from a warm parent (tether_cli.forkserver);
`TETHER_TEST_FORKSERVER=0` starts them with plain `subprocess.Popen` instead."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether_cli import forkserver

from tether_testkit.ports import free_port
from tether_testkit.releases import Release

LOG_DIR = Path(os.environ.get("TETHER_TEST_LOG_DIR", tempfile.gettempdir())) / "tether-test-logs"


def forking() -> bool:
    return os.environ.get("TETHER_TEST_FORKSERVER", "1") != "0"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes] | forkserver.ForkedProcess
    log_path: Path
    addr: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: no drain, no lease release: a crash."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def run_module(
    module: str, *args: str, env: Mapping[str, str], timeout: float = 60, inherit: bool = True
) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` as a user runs it, to its end, stdout and stderr captured apart (a
    process: forked from the warm parent, or a subprocess with TETHER_TEST_FORKSERVER=0). Its
    environment: this one plus `env`, or `env` alone with `inherit=False`."""
    full_env = {**os.environ, **env} if inherit else dict(env)
    if forking():
        return forkserver.run(module, list(args), full_env, timeout)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tether_cli(
    *args: str, env: Mapping[str, str], timeout: float = 60, inherit: bool = True
) -> subprocess.CompletedProcess[str]:
    """`tether ARGS` as a user runs it (see run_module)."""
    return run_module("tether_cli.main", *args, env=env, timeout=timeout, inherit=inherit)


def _spawn(
    name: str,
    args: list[str],
    env: dict[str, str],
    addr: str,
    release: Release | None = None,
    prefix: list[str] | None = None,
) -> Proc:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"{name}-{os.getpid()}-{time.time_ns()}.log"
    if release is not None:
        # A process of another version (tether_testkit.releases): its own interpreter, tree and
        # environment, none of this checkout's.
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [*(prefix or []), release.python, *args], env=release.env(**env), cwd=release.src,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return Proc(name=name, popen=popen, log_path=log_path, addr=addr, env=env)
    full_env = {**os.environ, **env}
    # A preload (libfaketime's, for a pod with another clock) only takes in a new program, and a
    # `prefix` (`ip netns exec NS`: a host of its own network) runs one: a forked child is the
    # warm parent's image, in its namespace, so such a process starts cold.
    if forking() and args[0] == "-m" and "LD_PRELOAD" not in env and not prefix:
        forked = forkserver.spawn(args[1], args[2:], full_env, log_path)
        return Proc(name=name, popen=forked, log_path=log_path, addr=addr, env=env)
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            [*(prefix or []), sys.executable, *args],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Proc(name=name, popen=popen, log_path=log_path, addr=addr, env=env)


def _wait(proc: Proc, ready: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError(f"{proc.name} not ready in {timeout}s:\n{proc.log()}")


def grpc_serving(addr: str) -> bool:
    try:
        with grpc.insecure_channel(addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=0.5)
            return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.RpcError:
        return False


def http_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=0.5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def start_runtime(
    env: dict[str, str],
    *,
    name: str = "runtime",
    timeout: float = 30,
    addr: str = "",
    probe_addr: str = "",
    release: Release | None = None,
    prefix: list[str] | None = None,
) -> Proc:
    """`addr` lets a runtime started after a kill take its predecessor's address, so a gateway
    configured with it reaches the new one. `probe_addr`: where its readiness is asked (its
    plaintext health port, TETHER_GRPC_HEALTH_ADDR, when the API speaks TLS). `release`: a
    runtime of that version (the previous release) instead of this checkout's. `prefix`: what
    runs it (`ip netns exec NS` for a host of its own network, tether_testkit.netns)."""
    addr = addr or f"127.0.0.1:{free_port()}"
    proc = _spawn(
        name, ["-m", "tether_runtime"], {**env, "TETHER_GRPC_ADDR": addr}, addr, release, prefix
    )
    _wait(proc, lambda: grpc_serving(probe_addr or addr), timeout)
    return proc


def start_gateway(
    env: dict[str, str],
    runtime_target: str,
    *,
    name: str = "gateway",
    timeout: float = 30,
    port: int = 0,
    release: Release | None = None,
    host: str = "127.0.0.1",
    prefix: list[str] | None = None,
) -> Proc:
    """`port` lets a gateway started after a kill take its predecessor's address, as a restarted
    pod behind one service address would. `release`: a gateway of that version. `host` and
    `prefix`: its address and what runs it, for a host of its own network (tether_testkit.netns)."""
    port = port or free_port()
    url = f"http://{host}:{port}"
    proc = _spawn(
        name,
        ["-m", "tether_cli.main", "gateway"],
        {**env, "TETHER_HTTP_ADDR": f"{host}:{port}", "TETHER_RUNTIME_TARGET": runtime_target},
        url,
        release,
        prefix,
    )
    _wait(proc, lambda: http_ready(url), timeout)
    return proc
