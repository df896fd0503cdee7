"""`tether dev`: the whole system on one machine, started in order and stopped in reverse.

Stores first (embedded unless DATABASE_URL / REDIS_URL are set; data in TETHER_DEV_DIR,
default `.tether/`), then migrate and seed, then one runtime and one gateway as separate processes
(and the mailer example's SMTP sink, unless TETHER_DEMO_MAILER=0: `demo_mailer.py`).
Ctrl-C or SIGTERM stops the services first (they drain), then the stores; a second one kills at
once. If any process dies, everything stops and the exit code is non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tether_common.config import Settings
from tether_common.logging import setup_logging

from tether_cli import demo_mailer, dev_env
from tether_cli.demo_mailer import MailerDemo
from tether_cli.embedded import EmbeddedPostgres, EmbeddedRedis, EmbeddedStoreError
from tether_cli.supervisor import Supervisor

log = logging.getLogger(__name__)

DEV_DATABASE = "tether"


class _Interrupted(Exception):
    """SIGTERM before the supervisor's own handlers exist: unwind like Ctrl-C."""


def _raise_interrupted(signum: int, frame: object) -> None:
    raise _Interrupted(signal.Signals(signum).name)


@dataclass
class Stores:
    database_url: str
    redis_url: str
    embedded: list[EmbeddedPostgres | EmbeddedRedis] = field(default_factory=list)


async def _prepare(dsn: str, mailer: MailerDemo | None) -> None:
    from tether_runtime.api import admin

    applied = await admin.migrate(dsn)
    log.info("migrations applied", extra={"applied": applied})
    await admin.seed_demo(dsn)
    if mailer is not None:
        await demo_mailer.grant(dsn)
    log.info("demo data loaded")


def _start_stores(dev_dir: Path, stack: contextlib.ExitStack) -> Stores:
    database_url = os.environ.get("DATABASE_URL", "")
    redis_url = os.environ.get("REDIS_URL", "")
    embedded: list[EmbeddedPostgres | EmbeddedRedis] = []
    if not database_url:
        pg = EmbeddedPostgres(dev_dir / "postgres")
        stack.callback(pg.stop)
        pg.start()
        database_url = pg.create_database(DEV_DATABASE)
        embedded.append(pg)
    if not redis_url:
        rd = EmbeddedRedis(dev_dir / "redis")
        stack.callback(rd.stop)
        redis_url = rd.start()
        embedded.append(rd)
    return Stores(database_url, redis_url, embedded)


@contextlib.contextmanager
def _exclusive(dev_dir: Path) -> Iterator[IO[str]]:
    """Two `tether dev` on one data folder would fight over its Postgres."""
    with open(dev_dir / "dev.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EmbeddedStoreError(
                f"another `tether dev` is using {dev_dir}; stop it or set TETHER_DEV_DIR"
            ) from None
        yield lock


def run_dev(settings: Settings) -> int:
    if settings.env == "production":
        print("tether dev: refusing TETHER_ENV=production; run `tether runtime` and "
              "`tether gateway` against managed stores instead", file=sys.stderr)  # fmt: skip
        return 2
    setup_logging("tether-dev", settings.log_level)
    dev_dir = Path(os.environ.get("TETHER_DEV_DIR") or ".tether").resolve()
    dev_dir.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        with _exclusive(dev_dir), contextlib.ExitStack() as stack:
            stack.callback(print, "Tether stopped.", flush=True)
            try:
                dev_env.remove(dev_dir)  # an earlier `tether dev` killed with -9 left it
                for name in dev_env.forget_stale(os.environ):
                    print(f"tether dev: ignoring {name}: it names the embedded store of an "
                          "earlier `tether dev` (from a sourced env file)", file=sys.stderr)  # fmt: skip
                stores = _start_stores(dev_dir, stack)
                # Before migrate and seed: they, and every child, load the agents it names.
                mailer = demo_mailer.configure(os.environ)
                asyncio.run(_prepare(stores.database_url, mailer))
                supervisor = Supervisor(settings, stores.database_url, stores.redis_url,
                                        embedded=stores.embedded, dev_dir=dev_dir,
                                        mailer=mailer)  # fmt: skip
                return asyncio.run(supervisor.run())
            except (KeyboardInterrupt, _Interrupted):
                print("\ntether dev: interrupted during start-up; stopping", file=sys.stderr)
                return 130
            finally:
                # Stores stop last and must not be cut short by another Ctrl-C.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except EmbeddedStoreError as err:
        print(f"tether dev: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # e.g. DATABASE_URL / REDIS_URL set but nothing answers there
        print(f"tether dev: cannot reach a store: {err}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
