"""A real PgBouncer (the Debian package) in front of the tests' Postgres, on a free port: every
database in transaction mode (its wildcard entry), and `session_dbs` also under a `_session`
alias in session mode, for LISTEN. Started and stopped by the test that needs it; the bench
harness uses it too."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from tether_testkit.processes import free_port

INSTALL = "apt-get install -y pgbouncer"


def binary() -> str:
    """The pgbouncer executable; a missing one fails the test with the command that installs it
    (a test that skipped here would prove nothing)."""
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    if found is None:
        raise RuntimeError(
            f"pgbouncer is not installed: run `{INSTALL}` (make test does: .ci/ensure_test_deps)"
        )
    return found


@dataclass(frozen=True)
class PgBouncer:
    host: str
    port: int
    user: str
    log_path: Path

    def url(self, database: str, *, session: bool = False) -> str:
        """A DSN for `database` through the pooler: transaction mode, or its session alias."""
        name = f"{database}_session" if session else database
        return f"postgresql://{self.user}@{self.host}:{self.port}/{name}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _ini(
    upstream: str,
    port: int,
    folder: Path,
    pool_size: int,
    session_dbs: Sequence[str],
    idle_transaction_timeout_s: int,
) -> str:
    u = urlsplit(upstream)
    host, pg_port = u.hostname or "127.0.0.1", u.port or 5432
    user = unquote(u.username or "postgres")
    password = f" password={unquote(u.password)}" if u.password else ""
    # JIT off on every server connection: asyncpg's type-introspection query (run on a client
    # connection's first use of a type) is costly enough for Postgres to JIT-compile it, which
    # stalled a worker's first statements by 1.1-1.6 s through the pooler (bench/README.md).
    # Direct connections would pass jit=off as a startup setting; PgBouncer refuses those.
    target = f"host={host} port={pg_port} user={user}{password} connect_query='SET jit = off'"
    session = "".join(
        f"{db}_session = {target} dbname={db} pool_mode=session pool_size={pool_size}\n"
        for db in session_dbs
    )
    # auth_type=any: clients are not asked for a password (the shared Postgres trusts local
    # users anyway); each database entry names the user PgBouncer logs in as.
    # No ignore_startup_parameters: Tether's clients must send none PgBouncer does not know.
    return (
        "[databases]\n"
        f"{session}"
        f"* = {target}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        f"unix_socket_dir = {folder}\n"
        "auth_type = any\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\n"
        "min_pool_size = 0\n"
        "reserve_pool_size = 0\n"
        "max_client_conn = 2000\n"
        "max_db_connections = 0\n"
        # What the runtime's idle_in_transaction_session_timeout did without a pooler: a client
        # idle inside a transaction (a frozen worker holding a run's row lock) is cut off.
        f"idle_transaction_timeout = {idle_transaction_timeout_s}\n"
        "server_lifetime = 3600\n"
        "log_connections = 0\n"
        "log_disconnections = 0\n"
        "admin_users = postgres\n"
    )


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def pgbouncer(
    upstream: str,
    *,
    pool_size: int = 4,
    session_dbs: Sequence[str] = (),
    idle_transaction_timeout_s: int = 15,
) -> Iterator[PgBouncer]:
    """PgBouncer in front of `upstream` (any DSN of the Postgres server: host, port, user and
    password are taken from it). A small `pool_size` makes transactions of different clients
    really share server connections."""
    exe = binary()
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-"))
    ini = folder / "pgbouncer.ini"
    ini.write_text(_ini(upstream, port, folder, pool_size, session_dbs, idle_transaction_timeout_s))
    log_path = folder / "pgbouncer.log"
    args = [exe, str(ini)]
    if os.geteuid() == 0:
        # PgBouncer refuses to run as root; -u drops to an unprivileged user after start-up.
        os.chmod(folder, 0o777)
        ini.chmod(0o644)
        args[1:1] = ["-u", "nobody"]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not _answers(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            raise RuntimeError(f"pgbouncer did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.05)
    u = urlsplit(upstream)
    try:
        yield PgBouncer("127.0.0.1", port, unquote(u.username or "postgres"), log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(folder, ignore_errors=True)


def database_of(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


def with_host(dsn: str, bouncer: PgBouncer, *, session: bool = False) -> str:
    """`dsn`'s database through `bouncer` (keeps its query string)."""
    u = urlsplit(dsn)
    through = urlsplit(bouncer.url(database_of(dsn), session=session))
    return urlunsplit(through._replace(query=u.query))
