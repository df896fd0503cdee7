"""Helpers for security tests: fresh users (so per-user limits never collide), their tokens and
grants, and the routes that need no caller."""

from __future__ import annotations

import uuid
from typing import Any

from tether_common.auth import issue_token

from tether_testkit.secrets import TEST_SECRET

# Routes the OpenAPI document lists that need no caller (everything else must answer 401).
PUBLIC = {
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/"),
    ("post", "/v1/dev/token"),
    ("delete", "/v1/session"),  # logging out needs no login: it only clears a cookie
}


def new_user(prefix: str = "sec") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def bearer(user: str, **kw: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, user, **kw)}"}


async def grant_restart(db: Any, user: str) -> None:
    """The demo grants only alice and bob; a fresh user who must approve a restart gets one."""
    await db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
        user,
        "instance.restart",
        "*",
    )
