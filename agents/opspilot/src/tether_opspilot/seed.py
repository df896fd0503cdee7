"""The demo inventory (`tether seed-demo` runs it through the agent's `seed`). Idempotent: run
it as often as you like. `tether seed-demo --reset` runs `reset_inventory`, which puts it back as
it was first seeded (the one abnormal payment-api instance, the replica counts, the errors and
logs), so the approval walkthrough can be tried again. The demo users' grants are Tether's, not
the agent's: `tether seed-demo` adds them with `tether grants`."""

from __future__ import annotations

import asyncpg

SERVICES = [
    # name, env, replicas, instance statuses
    ("payment-api", "prod", 3, ["healthy", "abnormal", "healthy"]),
    ("payment-api", "staging", 1, ["healthy"]),
    ("checkout-web", "prod", 2, ["healthy", "healthy"]),
    ("search-api", "prod", 2, ["healthy", "healthy"]),
    ("notification-worker", "prod", 2, ["healthy", "healthy"]),
]

ERRORS = [
    (502, "upstream card-processor timed out after 3000ms"),
    (500, "NullPointerException in PaymentAuthorizer.authorize"),
    (503, "connection pool exhausted (max=50)"),
]

LOGS = [
    ("ERROR", "card-processor call timed out after 3000ms"),
    ("WARN", "connection pool at 50/50, waiting for a connection"),
    ("ERROR", "PaymentAuthorizer.authorize failed: NullPointerException"),
    ("INFO", "GC pause 820ms"),
]


def instance_id(service: str, env: str, n: int) -> str:
    return f"{service}-{n}" if env == "prod" else f"{service}-{env}-{n}"


async def seed_inventory(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(7417)")
            await _insert(conn, reset=False)


async def reset_inventory(pool: asyncpg.Pool) -> None:
    """The demo's own rows as first seeded, in one transaction: statuses, restart counts and
    replicas back, errors and logs written again with fresh times (they are "recent"). Rows the
    demo did not create stay, and so does `inv_operation`: it is the inventory API's record of
    which idempotency keys already acted, and a key must never act twice, reset or not."""
    async with pool.acquire() as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(7417)")
            await _insert(conn, reset=True)


async def _insert(conn: asyncpg.Connection, *, reset: bool) -> None:
    """The demo rows; the caller holds the advisory lock in a transaction. Without `reset`,
    rows that exist are left as they are."""
    keep = "DO NOTHING"
    for name, env, replicas, statuses in SERVICES:
        await conn.execute(
            "INSERT INTO inv_service (name, env, replicas) VALUES ($1, $2, $3) ON CONFLICT "
            + ("(name, env) DO UPDATE SET replicas = EXCLUDED.replicas" if reset else keep),
            name,
            env,
            replicas,
        )
        for n, status in enumerate(statuses, start=1):
            await conn.execute(
                "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT "
                + (
                    "(id) DO UPDATE SET service = EXCLUDED.service, env = EXCLUDED.env, "
                    "status = EXCLUDED.status, restart_count = 0, last_restart = NULL"
                    if reset
                    else keep
                ),
                instance_id(name, env, n),
                name,
                env,
                status,
            )
    bad = instance_id("payment-api", "prod", 2)
    if reset:
        await conn.execute("DELETE FROM inv_error WHERE service = 'payment-api' AND env = 'prod'")
        await conn.execute("DELETE FROM inv_log WHERE instance_id = $1", bad)
    elif await conn.fetchval("SELECT count(*) FROM inv_error"):
        return
    for i in range(12):
        code, msg = ERRORS[i % len(ERRORS)]
        await conn.execute(
            "INSERT INTO inv_error (service, env, instance_id, status_code, message, at)"
            " VALUES ('payment-api', 'prod', $1, $2, $3, now() - make_interval(mins => $4))",
            bad,
            code,
            msg,
            i,
        )
    for i, (level, line) in enumerate(LOGS):
        await conn.execute(
            "INSERT INTO inv_log (instance_id, level, line, at) "
            "VALUES ($1, $2, $3, now() - make_interval(mins => $4))",
            bad,
            level,
            line,
            i,
        )
