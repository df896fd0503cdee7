"""The wire API's guard: `make buf-breaking` compares the protos with the committed image of the
released API (proto/baseline/tether-v1.binpb), so it guards on any clone, CI's fresh one
included. Shown here with the real `buf`: today's protos pass, a removed field and a renumbered
one fail, and the image `make buf-baseline` writes is the same bytes every time."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

REPO = Path(__file__).resolve().parents[2]
BASELINE = REPO / "proto" / "baseline" / "tether-v1.binpb"
BUF = REPO / "node_modules" / ".bin" / "buf"
SERVICE = Path("proto/tether/runtime/v1/runtime_service.proto")


def _buf(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BUF.exists(), "node_modules/.bin/buf is missing: run `make setup` (npm ci)"
    return subprocess.run([str(BUF), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _copy(tmp_path: Path) -> Path:
    work = tmp_path / "repo"
    shutil.copytree(REPO / "proto", work / "proto", ignore=shutil.ignore_patterns("baseline"))
    shutil.copy(REPO / "buf.yaml", work / "buf.yaml")
    return work


def test_the_makefile_checks_against_the_committed_baseline() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "BUF_BASELINE := proto/baseline/tether-v1.binpb" in makefile
    assert "npx buf breaking --against $(BUF_BASELINE)" in makefile
    assert BASELINE.stat().st_size > 1000
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(BASELINE.relative_to(REPO))],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert tracked.returncode == 0, "the baseline must be committed: " + tracked.stderr


def test_todays_protos_keep_the_released_api(tmp_path: Path) -> None:
    out = _buf(_copy(tmp_path), "breaking", "--against", str(BASELINE))
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_removed_field_and_a_renumbered_one_are_refused(tmp_path: Path) -> None:
    work = _copy(tmp_path)
    proto = work / SERVICE
    text = proto.read_text()
    # StartRunRequest.idempotency_key: what a client's retries rely on.
    line = next(ln for ln in text.splitlines() if "string idempotency_key" in ln)
    proto.write_text(text.replace(line, "", 1))
    removed = _buf(work, "breaking", "--against", str(BASELINE))
    assert removed.returncode != 0
    assert "idempotency_key" in removed.stdout + removed.stderr

    number = line.split("=")[1].strip().rstrip(";")
    proto.write_text(text.replace(line, line.replace(f"= {number};", "= 99;"), 1))
    renumbered = _buf(work, "breaking", "--against", str(BASELINE))
    assert renumbered.returncode != 0, renumbered.stdout


def test_the_baseline_image_is_deterministic(tmp_path: Path) -> None:
    work = _copy(tmp_path)
    digests = set()
    for name in ("a.binpb", "b.binpb"):
        out = _buf(work, "build", "--exclude-source-info", "-o", str(tmp_path / name))
        assert out.returncode == 0, out.stderr
        digests.add(hashlib.sha256((tmp_path / name).read_bytes()).hexdigest())
    assert len(digests) == 1
