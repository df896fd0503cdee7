"""The previous release (deploy/previous-release), built from its commit alone for the upgrade
tests: `git archive <sha>` into `.tether/releases/<sha>/src`, its own virtualenv from its own
uv.lock (`uv sync --frozen --all-packages`, the tests' tools included), its generated gRPC code.
Built once per SHA and kept (a stamp file says it is whole); a lock file keeps two test processes
from building it at once. A missing commit fails loudly: a shallow clone says how to fetch it."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASE_FILE = ROOT / "deploy" / "previous-release"
RELEASES = ROOT / ".tether" / "releases"
BUILD_TIMEOUT_S = 900


@dataclass(frozen=True)
class Release:
    name: str  # tag-like, for people (v0.20)
    sha: str
    src: Path  # the release's tree

    @property
    def python(self) -> str:
        return str(self.src / ".venv" / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process of this release: its own virtualenv, none of ours."""
        env = {k: v for k, v in os.environ.items() if k not in _OURS}
        env["VIRTUAL_ENV"] = str(self.src / ".venv")
        env["PATH"] = f"{self.src / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra)
        return env


# Variables of this checkout's test process that must not leak into the release's processes.
_OURS = ("VIRTUAL_ENV", "PYTHONPATH", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID",
         "PYTEST_CURRENT_TEST", "UV_PROJECT_ENVIRONMENT", "PYTEST_ADDOPTS")  # fmt: skip


def previous() -> tuple[str, str]:
    """(name, sha) from deploy/previous-release (comments and blank lines skipped)."""
    for line in RELEASE_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sha = line.split()
            if len(sha) != 40:
                raise ValueError(f"{RELEASE_FILE}: {sha!r} is not a full commit SHA")
            return name, sha
    raise ValueError(f"{RELEASE_FILE}: no release line")


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=120)


def _require_commit(name: str, sha: str) -> None:
    if _git("cat-file", "-e", f"{sha}^{{commit}}").returncode == 0:
        return
    shallow = _git("rev-parse", "--is-shallow-repository").stdout.decode().strip() == "true"
    hint = (
        "this clone is shallow: run `git fetch --unshallow` (CI: fetch-depth 0)"
        if shallow
        else "fetch main's history (`git fetch origin main`)"
    )
    raise RuntimeError(
        f"the previous release {name} ({sha}, deploy/previous-release) is not in this clone: {hint}"
    )


def _uv() -> str:
    found = shutil.which("uv")
    if found:
        return found
    local = ROOT / ".tools" / "uv" / "bin" / "uv"
    if local.exists():
        return str(local)
    raise RuntimeError("uv not found on PATH nor in .tools/uv (run `make setup`)")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        done = subprocess.run(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S
        )
    if done.returncode != 0:
        raise RuntimeError(
            f"building the previous release failed: {' '.join(cmd)}\n{log.read_text()[-4000:]}"
        )


def _build(name: str, sha: str, home: Path) -> None:
    src = home / "src"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    log = home / "build.log"
    log.write_text(f"building {name} {sha}\n")
    archive = home / "src.tar"
    with open(archive, "wb") as out:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", sha],
            stdout=out, stderr=subprocess.PIPE, timeout=300,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"git archive {sha} failed: {done.stderr.decode()}")
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="tar")
    archive.unlink()
    env = Release(name, sha, src).env()
    env.pop("VIRTUAL_ENV")
    _run([_uv(), "sync", "--frozen", "--all-packages", "--compile-bytecode"], src, env, log)
    protos = sorted(str(p.relative_to(src)) for p in (src / "proto").rglob("*.proto"))
    _run(
        [str(src / ".venv" / "bin" / "python"), "-m", "grpc_tools.protoc", "-Iproto",
         "--python_out=libs/proto/src", "--pyi_out=libs/proto/src",
         "--grpc_python_out=libs/proto/src", *protos],
        src, env, log,
    )  # fmt: skip
    (src / "libs/proto/src/tether/runtime/v1/py.typed").touch()


def build_previous() -> Release:
    """The previous release, built (or found built) under .tether/releases/<sha>/."""
    name, sha = previous()
    home = RELEASES / sha
    release = Release(name, sha, home / "src")
    stamp = home / ".ready"
    if stamp.exists():
        return release
    _require_commit(name, sha)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be building it
        if not stamp.exists():
            began = time.monotonic()
            _build(name, sha, home)
            stamp.write_text(f"{name} {sha} built in {time.monotonic() - began:.0f}s\n")
            print(f"built the previous release {name} in {stamp.read_text()}", file=sys.stderr)
    return release


# The previous release's own tests the compatibility check runs against this version's schema:
# the SSE path (replay, resume on another gateway, heartbeats, drain), approvals and resume across
# pods, the claims and the fenced event append, write calls killed and resumed.
COMPAT_TESTS = (
    "tests/integration/test_gateway_sse.py",
    "tests/integration/test_approvals.py",
    "services/runtime/tests/streams/test_claims_and_bus.py",
    "services/runtime/tests/engine/test_write_call_crashes.py",
)
PLUGIN_DIR = ROOT / "tests" / "release_compat"


@dataclass
class CompatResult:
    returncode: int
    output: str  # the release's pytest output
    migrations: str  # what this version's migrator printed for each database made
    seconds: float


def run_compat_tests(
    release: Release,
    tests: tuple[str, ...],
    *,
    admin_dsn: str,
    redis_url: str,
    extra_migrations: str = "",
    pytest_args: tuple[str, ...] = (),
    timeout: float = 600,
) -> CompatResult:
    """The release's pytest on `tests`, in its own tree and virtualenv, every database it makes
    migrated first by this version's code (tests/release_compat/tether_release_compat.py), then
    with the migrations of `extra_migrations` ("package:folder") too when given."""
    home = release.src.parent
    log = home / f"compat-{os.getpid()}-{time.time_ns()}.log"
    migrate = [
        "env", f"PYTHONPATH={ROOT / 'tests'}", sys.executable, "-m", "tether_testkit.new_schema",
    ]  # fmt: skip
    if extra_migrations:
        migrate += ["--extra", extra_migrations]
    env = release.env(
        PYTHONPATH=str(PLUGIN_DIR),
        TETHER_COMPAT_MIGRATE=json.dumps(migrate),
        TETHER_COMPAT_LOG=str(log),
        TETHER_TEST_DATABASE_URL=admin_dsn,
        TETHER_TEST_REDIS_URL=redis_url,
        PYTHONDONTWRITEBYTECODE="",
    )
    began = time.monotonic()
    done = subprocess.run(
        [release.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "tether_release_compat", *pytest_args, *tests],
        cwd=release.src, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    seconds = time.monotonic() - began
    migrations = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    return CompatResult(done.returncode, done.stdout + done.stderr, migrations, seconds)
