"""`tether conformance` run as a user runs it (a subprocess) against the machine's Postgres and
Redis, and its table read back: shared by the CLI's conformance tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parents[1])
POINTS = ("before", "during", "after")


def conformance(
    admin_dsn: str,
    redis_url: str,
    *args: str,
    agents: str = "",
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **(extra or {}),
        "DATABASE_URL": admin_dsn,
        "REDIS_URL": redis_url,
        "TETHER_ENV": "dev",
        "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")])),
    }
    if agents:
        env["TETHER_AGENTS"] = agents
    return subprocess.run(
        [sys.executable, "-m", "tether_cli.main", "conformance", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )


def table_rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The table's rows by (tool, kill point): their columns split on runs of two spaces."""
    rows = {}
    for line in out.splitlines():
        cols = [c.strip() for c in line.split("  ") if c.strip()]
        if len(cols) >= 10 and cols[2] in POINTS:
            rows[(cols[0], cols[2])] = cols
    return rows
