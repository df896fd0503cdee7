"""Child processes the CLI owns: free ports, dying with their parent, and stopping in steps."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


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


def die_with_parent(sig: signal.Signals) -> Callable[[], None] | None:
    """A preexec hook so the child gets `sig` if this process is killed without cleaning up.

    Linux only. The kernel sends it when the *thread* that forked exits, so it is used only for
    children spawned from the main thread (a worker thread may end long before we do).
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not (
        threading.main_thread()
    ):
        return None
    parent = os.getpid()

    def hook() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), int(sig))

    return hook


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
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
            process_group=0,
            preexec_fn=die_with_parent(death_signal),
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
