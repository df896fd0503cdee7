"""Helpers for security tests: fresh users (so per-user limits never collide), their tokens and
grants, and the routes that need no caller."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tether_common.auth import issue_token

from tether_testkit.inventory import abnormal_service
from tether_testkit.secrets import TEST_SECRET

# Routes the OpenAPI document lists that need no caller (everything else must answer 401).
PUBLIC = {
    ("options", "/ai-sdk/{tail}"),  # a CORS preflight, as /agui's below
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/"),
    ("post", "/v1/dev/token"),
    # A CORS preflight: a browser sends it without credentials, and it grants nothing itself.
    ("options", "/agui/{tail}"),
}


def concrete_path(path: str, conv: str, run: str, agent: str = "opspilot") -> str:
    """An OpenAPI path with its parameters filled: `{id}` is the conversation under
    /v1/conversations/ and the run elsewhere, `{agent}` an agent, `{run_id}` the run."""
    path = path.replace("{id}", conv if path.startswith("/v1/conversations/") else run)
    return path.replace("{agent}", agent).replace("{run_id}", run).replace("{tail}", "x")


# The security suite's gateway allows this much clock skew (default 30 s) so that a test waiting
# out a token's expiry on the wall clock waits seconds, not half a minute.
GATEWAY_LEEWAY_S = 1.0


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


async def owned_interrupted_run(db: Any, gw: str, http: Any, user: str) -> dict[str, str]:
    """A conversation and a run of `user`, waiting at a confirmation."""
    await grant_restart(db, user)
    service, instance = await abnormal_service(db, prefix="auth")
    h = bearer(user)
    async with http.post(f"{gw}/v1/conversations", json={"title": "mine"}, headers=h) as r:
        conv = (await r.json())["conversation"]["id"]
    body = {"text": f"restart the abnormal {service} instance"}
    async with http.post(f"{gw}/v1/conversations/{conv}/runs", json=body, headers=h) as r:
        assert r.status == 201, await r.text()
        run_id = (await r.json())["run"]["id"]
    for _ in range(200):
        async with http.get(f"{gw}/v1/runs/{run_id}", headers=h) as r:
            run = (await r.json())["run"]
        if run["status"] == "interrupted":
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the run never asked for confirmation: {run}")
    intr = run["pendingInterrupt"]["id"]
    return {"conv": conv, "run": run_id, "interrupt": intr, "instance": instance}
