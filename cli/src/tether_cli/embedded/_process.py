"""Child processes the CLI owns: free ports, dying with their parent, and stopping in steps."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path


class EmbeddedStoreError(RuntimeError):
    """An embedded server could not start; the message carries the tail of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def die_with_parent(sig: signal.Signals) -> list[str]:
    """A command prefix so the child gets `sig` if this process is killed without cleaning up:
    util-linux's `setpriv --pdeathsig`, which sets it in the child itself before exec'ing the
    server. Not a `preexec_fn` calling prctl: that runs Python (and dlopen) between fork and exec,
    which deadlocks in a process with other threads (gRPC's, in a test process that also runs
    grpc.aio): a cluster node's child was seen stuck there, never reaching exec.

    Linux only. The kernel sends it when the *thread* that forked exits, so it is used only for
    children spawned from the main thread (a worker thread may end long before we do). Without
    setpriv (util-linux is essential on Debian) the child simply does not die with us.
    """
    setpriv = shutil.which("setpriv")
    if (
        not sys.platform.startswith("linux")
        or setpriv is None
        or threading.current_thread() is not threading.main_thread()
    ):
        return []
    return [setpriv, "--pdeathsig", sig.name.removeprefix("SIG"), "--"]


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    death_signal: signal.Signals,
    cwd: Path | None = None,
    user: int | None = None,
    group: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a server in its own process group (a terminal's Ctrl-C must not reach it: we stop
    it ourselves, after the services that use it), logging to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*die_with_parent(death_signal), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
            process_group=0,
        )


def stop(proc: subprocess.Popen[bytes], steps: Sequence[tuple[signal.Signals, float]]) -> int:
    """Send each signal in turn, waiting up to its timeout; SIGKILL when all were ignored."""
    for sig, timeout in steps:
        if proc.poll() is not None:
            break
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.kill()
    return proc.wait()


def still_running(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to `seconds` for the process to exit; True if it is still running afterwards.
    (The start-up loops use this as their pause, so a crash is noticed at once.)"""
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return True
    return False


def log_tail(log: Path, lines: int = 30) -> str:
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
