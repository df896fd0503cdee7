"""Tether's processes forked from a warm parent, for what starts many of them: `tether
conformance` (two runtimes per crash case) and the test suite (a few hundred runtimes, gateways
and `tether` commands on 2 cores). A cold start spends 2-3 s of CPU importing libraries (4 s with
LangGraph); a fork from a parent that imported them once costs a tenth of that. The fork server
imports the heavy libraries (redis, aiohttp, pydantic, asyncpg, OpenTelemetry, grpc, LangGraph and
LangChain, and Tether's own runtime, gateway and CLI modules: none that reads the environment when
imported, so no agent) and forks each process from there. grpc is imported but never used in the
server: its core starts no thread and holds no state until a channel or a server exists, which
only a child creates (the server checks it is still one thread before each fork). The child is
still a real process of its own: its own pid, environment, log file and exit status, killed by
SIGKILL like any other.

The wire between a caller and its fork server is one JSON line each way per request on the
server's stdin/stdout. The server ends when its caller does (its stdin closes), and its children
with it."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# What the server imports once: the heavy third-party libraries both services load, then Tether's
# own modules that the runtime, the gateway and the `tether` command import before they read any
# setting. No agent: agents may read the environment when imported (checked at the server's start).
WARM = (
    "asyncio",
    "uvloop",
    "redis.asyncio",
    "redis.asyncio.cluster",
    "aiohttp",
    "aiohttp.web",
    "pydantic",
    "pydantic_settings",
    "asyncpg",
    "jwt",
    "cryptography.hazmat.primitives.asymmetric.rsa",
    "jsonschema",
    "prometheus_client",
    "psutil",
    "yaml",
    "google.protobuf.descriptor_pool",
    "google.protobuf.json_format",
    "opentelemetry.trace",
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk.resources",
    "detect_secrets.plugins.aws",
    "detect_secrets.plugins.keyword",
    "detect_secrets.plugins.jwt",
    "tether_common.grpc_io_path",  # before grpc: it chooses grpc core's I/O threads
    "grpc",
    "grpc.aio",
    "grpc_health.v1.health",
    "tether_runtime.server",
    "tether_gateway.server",
    "tether_cli.main",
    # What a runtime loading a LangGraph agent imports besides (3-4 s of CPU at each start): the
    # libraries, not the agents. They read no setting at import that a caller changes (langsmith
    # caches its environment reads: the child clears that cache, see _child).
    "langchain_core.messages",
    "langchain_openai",
    "langgraph.graph",
    "langgraph.prebuilt",
    "langgraph.pregel",
    "langgraph.types",
    "tether_langgraph",
)
# Packages the server must never import: an agent's module may read the environment at import,
# which the child's own environment must decide.
NEVER_WARM = ("tether_opspilot", "tether_mailer", "tether_lgops", "tether_bench", "lgops_brain")
PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15


def _die_with_parent(sig: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


# -- the server side ------------------------------------------------------------------------------


_SERVER_PYTHONPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _sys_path(cwd: str, pythonpath: str) -> list[str]:
    """The sys.path `python -m` would have in `cwd` with this PYTHONPATH: the folder, PYTHONPATH's
    entries, then the interpreter's own (the server's, less its script folder and PYTHONPATH)."""
    own = [p for p in sys.path[1:] if p not in _SERVER_PYTHONPATH]
    return [cwd, *[p for p in pythonpath.split(os.pathsep) if p], *own]


def _name_process(module: str, argv: list[str]) -> None:
    """Name the child after what it runs (ps, top and process accounting show it), where every
    fork would otherwise show as `python`: tether-runtime, tether-gateway, tether-<command>."""
    if module == "tether_runtime":
        name = "tether-runtime"
    elif module == "tether_cli.main" and argv:
        name = f"tether-{argv[0]}"
    else:
        name = module
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _forget_environment_reads() -> None:
    """The warm libraries' cached reads of the environment, made in the server, are the child's
    to make again with its own."""
    langsmith_utils = sys.modules.get("langsmith.utils")
    cached = getattr(langsmith_utils, "get_env_var", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


def _child(request: Mapping[str, Any], wire: tuple[int, int]) -> None:
    """In the forked child: become the requested process, then exit with its status."""
    code = 1
    try:
        _die_with_parent(signal.SIGKILL)
        for fd in wire:
            os.close(fd)
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(
            request.get("stderr") or request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {null, out, err}:
            os.close(fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdio
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _forget_environment_reads()
        sys.path[:] = _sys_path(request["cwd"], request["env"].get("PYTHONPATH", ""))
        importlib.invalidate_caches()  # files written since the server started (agent packages)
        module, argv = request["module"], request["argv"]
        _name_process(module, argv)
        sys.argv = [module, *argv]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, int | None):
                print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a crash is the process's exit status, as for a process
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _assert_one_thread() -> None:
    """A fork copies only the calling thread: a thread that grpc's core (or anything else)
    started in the server would be missing in the child, with whatever locks it held."""
    threads = os.listdir(f"/proc/{os.getpid()}/task")
    assert len(threads) == 1, f"the fork server has {len(threads)} threads; forking is unsafe"


def serve() -> None:
    """The fork server: warm up, then answer one request per line until stdin closes (the caller
    ended, however it ended); its children die with it (each has PR_SET_PDEATHSIG). The
    server itself takes no death signal: it would fire when the *thread* that started it ends,
    and callers start processes from worker threads."""
    for name in WARM:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    warmed_agents = [m for m in sys.modules if m.split(".")[0] in NEVER_WARM]
    assert not warmed_agents, f"the fork server imported agent modules: {warmed_agents[:5]}"
    # What the imports made is never garbage: kept out of every collection, a child's collector
    # neither walks it (seconds of CPU for the whole warm heap) nor copies its pages by writing
    # to their headers.
    gc.collect()
    gc.freeze()
    # The wire moves off fds 0 and 1, so a child's stdio never lands on it (nor a stray print).
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    statuses: dict[int, int] = {}
    reader = os.fdopen(wire_in, "r", closefd=False)
    writer = os.fdopen(wire_out, "w", buffering=1, closefd=False)
    writer.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in reader:
        request = json.loads(line)
        op = request["op"]
        if op == "spawn":
            _assert_one_thread()
            pid = os.fork()
            if pid == 0:
                _child(request, (wire_in, wire_out))
            # A pid comes back once its holder was reaped (pid_max here: 32768, and a test
            # session forks thousands): the new child's status is not the old one's.
            statuses.pop(pid, None)
            answer: dict[str, Any] = {"pid": pid}
        elif op == "poll":
            pid = request["pid"]
            if pid not in statuses:
                with contextlib.suppress(ChildProcessError):
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        statuses[pid] = os.waitstatus_to_exitcode(status)
            answer = {"code": statuses.get(pid)}
        else:
            answer = {"error": f"unknown op {op!r}"}
        writer.write(json.dumps(answer) + "\n")


# -- the caller's side ------------------------------------------------------------------------------


class ForkServer:
    """A process's fork server, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def _ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", "from tether_cli.forkserver import serve; serve()"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                self._read()  # {"ready": pid}
            stdin = self._proc.stdin
            assert stdin is not None
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            return self._read()

    def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the fork server died")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def spawn(
        self,
        module: str,
        argv: list[str],
        env: Mapping[str, str],
        log: Path,
        stderr: Path | None = None,
    ) -> ForkedProcess:
        """`log` takes the process's stdout, and its stderr too unless `stderr` is given."""
        answer = self._ask(
            {
                "op": "spawn",
                "module": module,
                "argv": argv,
                "env": dict(env),
                "log": str(log),
                "stderr": str(stderr) if stderr else "",
                "cwd": os.getcwd(),
            }
        )
        return ForkedProcess(self, int(answer["pid"]), [sys.executable, "-m", module, *argv])

    def status(self, pid: int) -> int | None:
        code = self._ask({"op": "poll", "pid": pid})["code"]
        return None if code is None else int(code)


class ForkedProcess:
    """What callers use of `subprocess.Popen`, for a process the fork server started: its pid, its
    exit status (`poll`, `wait`, `returncode`) and signals."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.02)  # noqa: TID251 - a blocking wait, as Popen.wait is, for sync callers
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a pid that may be reused
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_server: ForkServer | None = None


def spawn(
    module: str, argv: list[str], env: Mapping[str, str], log: Path, stderr: Path | None = None
) -> ForkedProcess:
    global _server
    if _server is None:
        _server = ForkServer()
    return _server.spawn(module, argv, env, log, stderr)


def run(
    module: str, argv: list[str], env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, module, *argv], capture_output=True, text=True)`, forked."""
    with tempfile.TemporaryDirectory(prefix="tether-fork-run-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        proc = spawn(module, argv, env, out, err)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
        return subprocess.CompletedProcess(
            proc.args, code, out.read_text(errors="replace"), err.read_text(errors="replace")
        )
