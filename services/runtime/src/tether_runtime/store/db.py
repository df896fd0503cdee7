"""The asyncpg pool: one per process, JSON codecs installed once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

import asyncpg
from tether_common import json_codec, tcp_liveness
from tether_common.backoff import Backoff

from tether_runtime.store.stalled_sessions import named
from tether_runtime.store.statement_count import CountingConnection

T = TypeVar("T")

# The failures that mean "the store is unreachable right now" (restart, failover, network): the
# caller may retry, so the API answers UNAVAILABLE rather than INTERNAL.
STORE_DOWN: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,  # e.g. too many connections
)

# Any failure talking to the store, outages and server-side errors alike: a worker that meets one
# keeps no state (its lease expires and a worker retries); a stream retries its read.
STORE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # includes TimeoutError
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a connection the server ended mid-transaction
)

Pool = asyncpg.Pool
Conn = asyncpg.Connection

# A transaction Postgres aborted only because of what ran beside it: running it again from the
# start is correct and, after a short wait, almost always succeeds. That includes a migration of
# a rolling upgrade's expand step: a new column changes what `SELECT *` returns, and a statement
# this pod prepared before it fails once ("cached plan must not change result type"); asyncpg
# re-prepares it by itself outside a transaction, and drops it from its cache inside one, where
# only running the transaction again helps (the previous release logged it as an INTERNAL error).
RETRYABLE: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.InvalidCachedStatementError,
)


# 4 to 20 ms after the first collision, doubling: 0.01 * 2**attempt, jittered from a fifth of it.
COLLISION_BACKOFF = Backoff(0.02, jitter=(0.2, 1.0))


async def retrying(
    db: asyncpg.Pool | asyncpg.Connection,
    fn: Callable[[asyncpg.Connection], Awaitable[T]],
    attempts: int = 5,
    *,
    transaction: bool = True,
    retryable: tuple[type[BaseException], ...] = RETRYABLE,
    backoff: Backoff = COLLISION_BACKOFF,
) -> T:
    """`fn(conn)` in a transaction of its own, run again from the start when Postgres aborts it
    for a deadlock or a serialization failure (or whatever `retryable` names), after a short
    jittered wait (so two requests that collided do not collide again in step). `fn` must have
    no effect outside the transaction (publish after it returns). The last attempt's error
    propagates. `transaction=False`: `fn` is one statement, atomic on its own (no BEGIN and
    COMMIT round trips). `db`: a pool (a connection from it per attempt) or one connection."""
    for attempt in range(1, attempts + 1):
        try:
            held = db.acquire() if isinstance(db, asyncpg.Pool) else contextlib.nullcontext(db)
            async with held as conn:
                if not transaction:
                    return await fn(conn)
                async with conn.transaction():
                    return await fn(conn)
        except retryable:
            if attempt >= attempts:
                raise
            await asyncio.sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")  # the loop returns or raises


# A pooled connection left half-open (a NAT or firewall forgot it, the server's machine vanished:
# no FIN, no RST) hung each statement sent on it until command_timeout (30 s), and the pod, which
# still reaches Postgres on new connections, kept taking calls that waited that long
# (tests/integration/chaos/test_chaos_links.py, half-open Postgres: 137 of 295 calls through the
# gateway failed over 20 s). Data unacknowledged for 5 s now ends the connection (an OSError the
# store-outage retries handle) and the pool dials a fresh one; keepalive probes do the same for
# an idle one (tether_common.tcp_liveness).
def _fail_fast_when_silent(conn: asyncpg.Connection) -> None:
    transport = getattr(conn, "_transport", None)  # asyncpg exposes no socket options
    tcp_liveness.fail_fast_when_silent(
        transport.get_extra_info("socket") if transport is not None else None
    )


async def _init(conn: asyncpg.Connection) -> None:
    _fail_fast_when_silent(conn)
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name, encoder=json_codec.dumps, decoder=json.loads, schema="pg_catalog"
        )


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Pooled connections keep no session state (advisory locks are transaction-scoped, LISTEN
    has its own connection), so the default reset query would be a wasted round trip per release."""


def pooler_options(pooler: str) -> dict[str, int]:
    """asyncpg options for a DSN that goes through a transaction-mode pooler (PgBouncer 1.18:
    no protocol-level prepared statements). Between two transactions a client connection may
    land on another server connection, so a named statement asyncpg cached on one is unknown
    on the next (or collides with another client's of the same name): no statement cache.
    asyncpg then prepares each statement unnamed and sends Parse/Describe with Flush, not Sync,
    so prepare and execute stay on one server connection. Costs a round trip per statement."""
    return {"statement_cache_size": 0} if pooler == "transaction" else {}


async def connect(dsn: str) -> asyncpg.Connection:
    """One connection for a short job (migrations, a CLI verb): without a statement cache, so it
    is safe through a transaction pooler whatever TETHER_DB_POOLER says; a short job runs each
    statement about once, so the cache would buy it nothing."""
    return await asyncpg.connect(dsn, **pooler_options("transaction"))


async def create_pool(
    dsn: str,
    *,
    min_size: int = 2,
    max_size: int = 20,
    idle_tx_timeout_s: float | None = None,
    pooler: str = "none",
) -> asyncpg.Pool:
    """`idle_tx_timeout_s`: the server ends a session left idle inside a transaction this long.
    A worker frozen (SIGSTOP, VM pause) or partitioned between `reserve` and COMMIT holds the run
    row's lock, and `claim` skips locked rows: without the limit no worker could take the run
    over until the zombie woke up (or TCP keepalive gave up, hours later).

    `pooler="transaction"`: no statement cache, and no startup `server_settings` (PgBouncer
    refuses a startup parameter it does not know, and a session setting would not follow the
    client to its next server connection anyway): the idle-in-transaction limit is then the
    pooler's `idle_transaction_timeout` or the role's setting (README, "Running behind
    PgBouncer").

    Every session is named by its DSN (`stalled_sessions.named`: the DSN's `application_name`,
    else `tether-runtime`, which PgBouncer passes on): the store watch ends those of that name
    that stall mid-command."""
    settings: dict[str, str] = {}
    if idle_tx_timeout_s and pooler != "transaction":
        settings["idle_in_transaction_session_timeout"] = str(int(idle_tx_timeout_s * 1000))
    pool = await asyncpg.create_pool(
        named(dsn),
        min_size=min_size,
        max_size=max_size,
        init=_init,
        reset=_no_reset,
        command_timeout=30,
        server_settings=settings,
        **pooler_options(pooler),
        # counts statements per kind for tether_db_statements_total (statement_count.py)
        connection_class=CountingConnection,
    )
    assert pool is not None
    return pool


async def db_now(db: asyncpg.Pool | asyncpg.Connection) -> datetime:
    """Postgres's clock: the one every expiry is decided by (leases, cards, idempotency keys,
    retention), so that pods whose clocks differ agree."""
    now: datetime = await db.fetchval("SELECT now()")
    return now


class DbClock:
    """Postgres's clock for what is counted from it but not decided by it at once (a card's
    expiry): read with `db_now` at most once every `resync_s`, and in between that reading
    plus this process's monotonic time since. It runs behind Postgres by at most the reading's
    round trip, and a pod whose own wall clock is off reads the same time as any other."""

    def __init__(self, pool: asyncpg.Pool, resync_s: float = 60.0) -> None:
        self.pool = pool
        self.resync_s = resync_s
        self._read: tuple[datetime, float] | None = None  # (Postgres's now, monotonic after)

    async def now(self) -> datetime:
        read = self._read
        if read is None or time.monotonic() - read[1] > self.resync_s:
            # Counted from when the answer came: Postgres read its clock before that.
            now = await db_now(self.pool)
            read = self._read = (now, time.monotonic())
        return read[0] + timedelta(seconds=time.monotonic() - read[1])
