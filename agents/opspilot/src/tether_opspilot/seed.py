"""The demo inventory (`tether seed-demo` runs it through the agent's `seed`). Idempotent: run
it as often as you like. The demo users' grants are Tether's, not the agent's: `tether seed-demo`
adds them with `tether grants`."""

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


def instance_id(service: str, env: str, n: int) -> str:
    return f"{service}-{n}" if env == "prod" else f"{service}-{env}-{n}"


async def seed_inventory(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(7417)")
            for name, env, replicas, statuses in SERVICES:
                await conn.execute(
                    "INSERT INTO inv_service (name, env, replicas) VALUES ($1, $2, $3) "
                    "ON CONFLICT DO NOTHING",
                    name,
                    env,
                    replicas,
                )
                for n, status in enumerate(statuses, start=1):
                    await conn.execute(
                        "INSERT INTO inv_instance (id, service, env, status) "
                        "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                        instance_id(name, env, n),
                        name,
                        env,
                        status,
                    )
            have = await conn.fetchval("SELECT count(*) FROM inv_error")
            if not have:
                bad = instance_id("payment-api", "prod", 2)
                for i in range(12):
                    code, msg = ERRORS[i % len(ERRORS)]
                    await conn.execute(
                        "INSERT INTO inv_error (service, env, instance_id, status_code, message, at)"
                        " VALUES ('payment-api', 'prod', $1, $2, $3, "
                        "now() - make_interval(mins => $4))",
                        bad,
                        code,
                        msg,
                        i,
                    )
                for i, (level, line) in enumerate(
                    [
                        ("ERROR", "card-processor call timed out after 3000ms"),
                        ("WARN", "connection pool at 50/50, waiting for a connection"),
                        ("ERROR", "PaymentAuthorizer.authorize failed: NullPointerException"),
                        ("INFO", "GC pause 820ms"),
                    ]
                ):
                    await conn.execute(
                        "INSERT INTO inv_log (instance_id, level, line, at) "
                        "VALUES ($1, $2, $3, now() - make_interval(mins => $4))",
                        bad,
                        level,
                        line,
                        i,
                    )
