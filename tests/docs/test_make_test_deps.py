"""`make test` brings what its tests need or stops first: `.ci/ensure_test_deps` (the Makefile's
`test-deps`, run before pytest) passes when Chromium, curl, jq, pgbouncer, redis-server,
redis-cli, faketime and nft are there, and where it cannot install one (no apt-get here) it exits 1 before any test,
printing the command to run. `.ci/run` installs none of them: CI proves the README's path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "ensure_test_deps"
TOOLS = ("id", "curl", "jq", "pgbouncer", "redis-server", "redis-cli", "faketime", "nft")


def _run(tmp_path: Path, chromium: Path, present: bool = True) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"  # `id` and the tools: no apt-get, no sudo
    bin_dir.mkdir(exist_ok=True)
    for tool in TOOLS if present else ("id",):
        found = shutil.which(tool) or shutil.which(tool, path="/usr/sbin")
        assert found, f"{tool} is missing (make test installs it)"
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], capture_output=True, text=True, timeout=30,
        env={"PATH": str(bin_dir), "TETHER_CHROMIUM_PATH": str(chromium),
             "TETHER_SBIN_DIR": str(tmp_path / "sbin")},
    )  # fmt: skip


def test_make_test_runs_the_check_before_pytest() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "test: test-deps gen node_modules/.installed" in makefile
    assert "@$(CURDIR)/.ci/ensure_test_deps" in makefile
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci
    code = [line.split("#")[0] for line in ci.splitlines()]
    installs = [c for c in code if "apt-get" in c or "pip install" in c or "npm install" in c]
    assert installs == [], f".ci/run installs what make test must bring itself: {installs}"


@pytest.mark.process  # starts a process: not in test-fast
def test_present_chromium_passes(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    out = _run(tmp_path, fake)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


@pytest.mark.process  # starts a process: not in test-fast
def test_missing_tools_that_cannot_be_installed_stop_with_the_command(tmp_path: Path) -> None:
    out = _run(tmp_path, tmp_path / "nowhere" / "chromium", present=False)
    assert out.returncode == 1
    assert "tests/integration/test_pgbouncer.py" in out.stderr
    wanted = "chromium curl jq pgbouncer redis-server redis-tools faketime nftables"
    assert f"install {wanted} (Chromium so that" in out.stderr, out.stderr
    assert "Nothing was run." in out.stderr
    assert os.access(SCRIPT, os.X_OK)
