"""The Streamable HTTP test MCP server (mcp_http_server.py) as a process of a test: started on a
free port with its calls logged to a JSON-lines file, read back by tool and kind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tether_testkit.ledger import TESTS_DIR
from tether_testkit.processes import free_port

TOKEN = "mcp-test-token-1"


class Server:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.log = tmp / "calls.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.since = 0  # rows() reads the log from here: the current test's rows only

    def mark(self) -> None:
        """From now on, rows() sees only what is logged after this (a test's own calls)."""
        self.since = len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether_testkit.mcp_http_server", str(self.port)],
            env={
                **os.environ,
                "PYTHONPATH": TESTS_DIR,
                "MCP_HTTP_LOG": str(self.log),
                "MCP_HTTP_TOKEN": TOKEN,
                **env,
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "the MCP server never listened"
                assert self.proc.poll() is None, "the MCP server exited"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rows(self, tool: str, kind: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()[self.since :]
        rows = [json.loads(line) for line in lines if line]
        return [r for r in rows if r["tool"] == tool and r["kind"] == kind]
