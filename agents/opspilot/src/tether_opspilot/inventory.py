"""OpsPilot's demo ops API, in its own tables (migrations/). It behaves like a real external API: mutations take an idempotency key and
the same key never acts twice, so a worker can reconcile a call it lost track of."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
from asyncpg import Connection as Conn
from asyncpg import Pool

T = TypeVar("T")

# A pooled connection found dead: its statement's `command_timeout` (TimeoutError, an OSError),
# a reset, or asyncpg's own "the connection was closed".
LOST: tuple[type[BaseException], ...] = (OSError, asyncpg.InterfaceError)


async def on_live(pool: Pool, fn: Callable[[Conn], Awaitable[T]], attempts: int = 3) -> T:
    """`fn(conn)` on a pooled connection, again on a fresh one if that one turns out dead: the
    connections opened before it are expired too (a NAT or a cut link that lost one lost them
    all, and each would cost a timeout to find out). Only for reads and for `_once`, which the
    idempotency key makes safe to repeat."""
    for attempt in range(1, attempts + 1):
        try:
            async with pool.acquire() as conn:
                return await fn(conn)
        except LOST:
            if attempt >= attempts:
                raise
            await pool.expire_connections()
    raise AssertionError("unreachable")  # the loop returns or raises


def _tool_delay() -> float:
    # Lets tests hold a mutating call open long enough to kill the process inside it.
    return float(os.environ.get("TETHER_DEMO_TOOL_DELAY_S", "0") or 0)


async def find_instances(
    conn: Conn, service: str, env: str, status: str | None
) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT id, service, env, status, restart_count FROM inv_instance "
        "WHERE service = $1 AND env = $2 AND ($3::text IS NULL OR status = $3) ORDER BY id",
        service,
        env,
        status,
    )
    return [dict(r) for r in rows]


async def get_instance(conn: Conn, instance_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(
        "SELECT id, service, env, status, restart_count FROM inv_instance WHERE id = $1",
        instance_id,
    )
    return dict(row) if row else None


async def recent_errors(
    conn: Conn, service: str, env: str, limit: int = 20
) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT instance_id, status_code, message, at FROM inv_error WHERE service = $1 "
        "AND env = $2 ORDER BY at DESC LIMIT $3",
        service,
        env,
        limit,
    )
    return [{**dict(r), "at": r["at"].isoformat()} for r in rows]


async def logs(conn: Conn, instance_id: str, limit: int = 10) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT level, line, at FROM inv_log WHERE instance_id = $1 ORDER BY at DESC LIMIT $2",
        instance_id,
        limit,
    )
    return [{**dict(r), "at": r["at"].isoformat()} for r in rows]


async def get_service(conn: Conn, service: str, env: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(
        "SELECT name, env, replicas FROM inv_service WHERE name = $1 AND env = $2", service, env
    )
    return dict(row) if row else None


async def operation(conn: Conn, key: str) -> dict[str, Any] | None:
    """What the API did for this idempotency key, if anything: the reconciliation read."""
    row = await conn.fetchrow("SELECT result FROM inv_operation WHERE idempotency_key = $1", key)
    return dict(row["result"]) if row else None


async def _once(
    pool: Pool, key: str, kind: str, target: str, sql: str, *params: Any, missing: str
) -> dict[str, Any]:
    """One mutation under an idempotency key: the same key never acts twice (it answers what it
    did the first time), which is what lets Tether call again after a crash, and this function
    try again on a fresh connection when its connection is found dead (`on_live`)."""

    async def once(conn: Conn) -> dict[str, Any]:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", key)
            done = await operation(conn, key)
            if done is not None:
                return done
            row = await conn.fetchrow(sql, *params)
            result: dict[str, Any] = (
                {"ok": True, **dict(row)} if row else {"ok": False, "error": missing}
            )
            await conn.execute(
                "INSERT INTO inv_operation (idempotency_key, operation, target, result) "
                "VALUES ($1, $2, $3, $4)",
                key,
                kind,
                target,
                result,
            )
        return result

    return await on_live(pool, once)


async def restart_instance(
    pool: Pool, service: str, env: str, instance_id: str, key: str
) -> dict[str, Any]:
    delay = _tool_delay()
    if delay:
        await asyncio.sleep(delay / 2)
    result = await _once(
        pool,
        key,
        "restart",
        instance_id,
        "UPDATE inv_instance SET status = 'healthy', restart_count = restart_count + 1, "
        "last_restart = now() WHERE id = $1 AND service = $2 AND env = $3 "
        "RETURNING id, status, restart_count",
        instance_id,
        service,
        env,
        missing=f"no instance {instance_id} in {service}/{env}",
    )
    if delay:
        await asyncio.sleep(delay / 2)
    return result


async def scale_service(
    pool: Pool, service: str, env: str, replicas: int, key: str
) -> dict[str, Any]:
    return await _once(
        pool,
        key,
        "scale",
        f"{service}/{env}",
        "UPDATE inv_service SET replicas = $3 WHERE name = $1 AND env = $2 "
        "RETURNING name, env, replicas",
        service,
        env,
        replicas,
        missing=f"no service {service}",
    )


async def delete_instance(
    pool: Pool, service: str, env: str, instance_id: str, key: str
) -> dict[str, Any]:
    return await _once(
        pool,
        key,
        "delete",
        instance_id,
        "UPDATE inv_instance SET status = 'stopped' WHERE id = $1 AND service = $2 "
        "AND env = $3 RETURNING id, status",
        instance_id,
        service,
        env,
        missing=f"no instance {instance_id} in {service}/{env}",
    )
