"""Fresh demo targets per test: every test restarts its own abnormal instance."""

from __future__ import annotations

import secrets
from typing import Any


async def abnormal_service(conn: Any, prefix: str = "t") -> tuple[str, str]:
    """Insert a prod service with one abnormal instance; returns (service, instance id)."""
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
    return service, instance


async def executions(conn: Any, instance: str) -> int:
    """How many times the inventory really restarted this instance."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM inv_operation WHERE target = $1 AND operation = 'restart'",
            instance,
        )
    )
