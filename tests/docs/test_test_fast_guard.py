"""`make test-fast` holds its tests to starting no process (tether_testkit.no_processes): an
unmarked test that starts one fails there, naming it; marked `process`, it is left to `make test`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # runs pytest itself

ROOT = Path(__file__).resolve().parents[2]

SPAWNS = """
import asyncio
import os
import subprocess
import sys

import pytest


def test_popen():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


async def test_asyncio_subprocess():
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await proc.wait()


def test_fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


@pytest.mark.process
def test_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_pure():
    assert sum(range(4)) == 6
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tether_testkit.no_processes",
            "-o",
            "asyncio_mode=auto",
            *args,
            str(folder / "test_spawns.py"),
        ],
        cwd=folder,
        env={"PYTHONPATH": str(ROOT / "tests"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unmarked_test_that_starts_a_process_fails_and_a_marked_one_is_left_out(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_spawns.py").write_text(SPAWNS)
    fast = _pytest(tmp_path, "-m", "not process")
    out = fast.stdout + fast.stderr
    assert fast.returncode == 1, out
    assert "3 failed, 1 passed, 1 deselected" in out, out
    for name in ("test_popen", "test_asyncio_subprocess", "test_fork"):
        assert f"FAILED test_spawns.py::{name}" in out, out
    assert "ProcessStarted" in out and "mark it `@pytest.mark.process`" in out, out


def test_under_xdist_the_workers_start_and_are_guarded(tmp_path: Path) -> None:
    (tmp_path / "test_spawns.py").write_text(SPAWNS)
    fast = _pytest(tmp_path, "-m", "not process", "-n", "2")
    out = fast.stdout + fast.stderr
    assert "3 failed, 1 passed" in out, out
