"""Fresh demo targets per test: every test restarts its own abnormal instance, looked after by
`owner` (alice, unless a test says otherwise) the way the demo's alice looks after payment-api."""

from __future__ import annotations

import secrets
from typing import Any

OWNER_ACTIONS = ("logs.read", "instance.restart", "service.scale")


async def grant_service(conn: Any, user: str, service: str) -> None:
    """`user` may read the logs of, restart and scale `service` (in every environment): the
    demo grants' shape, for a service a test made."""
    await conn.executemany(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
        [(user, action, f"{service}/*") for action in OWNER_ACTIONS],
    )


async def abnormal_service(
    conn: Any, prefix: str = "t", owner: str | None = "alice"
) -> tuple[str, str]:
    """Insert a prod service with one abnormal instance, and grant it to `owner` (None: to
    nobody); returns (service, instance id)."""
    letters = "".join(secrets.choice("abcdefghjkmnpqrstuvwxyz") for _ in range(6))
    service = f"{prefix}-{letters}-api"
    instance = f"{service}-1"
    await conn.execute(
        "INSERT INTO inv_service (name, env, replicas) VALUES ($1, 'prod', 1)", service
    )
    await conn.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        instance,
        service,
    )
    if owner is not None:
        await grant_service(conn, owner, service)
    return service, instance


async def executions(conn: Any, instance: str) -> int:
    """How many times the inventory really restarted this instance."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM inv_operation WHERE target = $1 AND operation = 'restart'",
            instance,
        )
    )
