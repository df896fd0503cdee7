"""The fork server (tether_cli.forkserver) starts what `python -m` would: the process
gets the environment, PYTHONPATH, working folder and log file it was given, its own exit status
(an exit code, a crash, SIGKILL); grpc comes imported from its parent but unstarted, so the child
serves and calls gRPC as a fresh process does; and it costs less than a cold start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tether_cli import forkserver

pytestmark = pytest.mark.process

PROBE = textwrap.dedent(
    """
    import json, os, sys, time
    mode = os.environ["PROBE_MODE"]
    print(json.dumps({"env": os.environ.get("PROBE_VALUE"), "cwd": os.getcwd(),
                      "path0": sys.path[:3], "argv": sys.argv[1:],
                      "grpc_before": "grpc" in sys.modules,
                      "threads": len(os.listdir("/proc/self/task")),
                      "comm": open("/proc/self/comm").read().strip()}), flush=True)
    if mode == "grpc":
        import asyncio
        import grpc.aio
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        async def serve_and_call():
            server = grpc.aio.server()
            health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
            await server.stop(0)
            return answer.status

        sys.exit(0 if asyncio.run(serve_and_call()) == 1 else 4)
    if mode == "exit":
        sys.exit(int(sys.argv[1]))
    if mode == "crash":
        raise RuntimeError("probe crashed")
    if mode == "hang":
        time.sleep(600)
    """
)


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkgs"
    pkg.mkdir()
    (pkg / "fs_probe.py").write_text(PROBE)
    return pkg


def _spawn(probe: Path, tmp_path: Path, mode: str, *argv: str) -> tuple[object, Path]:
    log = tmp_path / f"{mode}.log"
    env = {
        "PROBE_MODE": mode,
        "PROBE_VALUE": "v-" + mode,
        "PYTHONPATH": str(probe),
        "PATH": "/usr/bin",
    }
    return forkserver.spawn("fs_probe", list(argv), env, log), log


def test_a_forked_process_has_its_env_path_argv_log_and_exit_code(
    probe: Path, tmp_path: Path
) -> None:
    proc, log = _spawn(probe, tmp_path, "exit", "3")
    assert proc.wait(30) == 3  # type: ignore[attr-defined]
    line = log.read_text().splitlines()[0]
    assert '"env": "v-exit"' in line and '"argv": ["3"]' in line, line
    assert str(probe) in line and '"grpc_before": true' in line, line
    assert '"threads": 1,' in line, line  # nothing started in the parent
    assert '"comm": "fs_probe"' in line, line  # named after what it runs, not `python`


def test_a_forked_process_serves_and_calls_grpc(probe: Path, tmp_path: Path) -> None:
    """grpc was imported by the warm parent, never started there: each child starts its own core.
    Three children in a row, the way a test starts a runtime after a killed one."""
    for _ in range(3):
        proc, log = _spawn(probe, tmp_path, "grpc")
        assert proc.wait(60) == 0, log.read_text()  # type: ignore[attr-defined]


def test_a_crash_is_exit_1_with_its_traceback_in_the_log(probe: Path, tmp_path: Path) -> None:
    proc, log = _spawn(probe, tmp_path, "crash")
    assert proc.wait(30) == 1  # type: ignore[attr-defined]
    assert "RuntimeError: probe crashed" in log.read_text()


def test_sigkill_is_minus_9_and_poll_says_running_until_then(probe: Path, tmp_path: Path) -> None:
    proc, _ = _spawn(probe, tmp_path, "hang")
    time.sleep(0.3)
    assert proc.poll() is None  # type: ignore[attr-defined]
    proc.send_signal(signal.SIGKILL)  # type: ignore[attr-defined]
    assert proc.wait(30) == -signal.SIGKILL  # type: ignore[attr-defined]
    proc.kill()  # a dead process is never signalled again (its pid may be reused)


PID_REUSE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from tether_cli import forkserver

    folder = Path(sys.argv[1])
    env = {"PYTHONPATH": sys.argv[2], "PATH": "/usr/bin", "PROBE_VALUE": "v"}
    first = forkserver.spawn("fs_probe", ["7"], {**env, "PROBE_MODE": "exit"}, folder / "a.log")
    assert first.wait(30) == 7
    # The next process of this pid namespace takes the first one's pid, as one does on a busy
    # machine once pid_max wraps.
    Path("/proc/sys/kernel/ns_last_pid").write_text(str(first.pid - 1))
    second = forkserver.spawn("fs_probe", [], {**env, "PROBE_MODE": "hang"}, folder / "b.log")
    assert second.pid == first.pid, (second.pid, first.pid)
    alive = second.poll() is None
    second.kill()
    print("alive" if alive else f"reported {second.returncode}", flush=True)
    """
)


def test_a_reused_pid_is_a_new_process(probe: Path, tmp_path: Path) -> None:
    """Once a child is reaped its pid comes back to a later one (pid_max is 32,768 here, and a
    test session forks thousands): the server reported the new, running child as exited with
    the old one's status, so a test saw its runtime "exit with -9" while it ran on, leaked. Run
    in a pid namespace of its own (root), where the next pid can be chosen."""
    script = tmp_path / "pid_reuse.py"
    script.write_text(PID_REUSE)
    assert os.geteuid() == 0, "choosing a pid takes root (CI and make test run as root here)"
    out = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script),
         str(tmp_path), str(probe)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "alive"
