"""`make test` brings what its tests need or stops first: `.ci/ensure_chromium` (the Makefile's
`test-deps`, run before pytest) passes when Chromium is there, and where it cannot install it
(no apt-get here) it exits 1 before any test, printing the command to run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / ".ci" / "ensure_chromium"


def _run(tmp_path: Path, chromium: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"  # `id`, curl and jq: no apt-get, no sudo
    bin_dir.mkdir(exist_ok=True)
    for tool in ("id", "curl", "jq"):
        found = shutil.which(tool)
        assert found, f"{tool} is missing (make test installs it)"
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], capture_output=True, text=True, timeout=30,
        env={"PATH": str(bin_dir), "TETHER_CHROMIUM_PATH": str(chromium)},
    )  # fmt: skip


def test_make_test_runs_the_check_before_pytest() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "test: test-deps gen node_modules/.installed" in makefile
    assert "@$(CURDIR)/.ci/ensure_chromium" in makefile
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_present_chromium_passes(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    out = _run(tmp_path, fake)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_missing_chromium_that_cannot_be_installed_stops_with_the_command(tmp_path: Path) -> None:
    out = _run(tmp_path, tmp_path / "nowhere" / "chromium")
    assert out.returncode == 1
    assert "tests/integration/test_gateway_browser.py" in out.stderr
    assert "install chromium (Chromium so that" in out.stderr and "Nothing was run." in out.stderr
    assert os.access(SCRIPT, os.X_OK)
