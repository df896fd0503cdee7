"""The /agui mount for a browser page on another origin: CORS granted to the origins
TETHER_AGUI_CORS_ORIGINS lists (langgraph/cors.py, one copy for both mounts, each with its own
list), errors readable, never credentials."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings

APP = "http://app.example.test:5173"
MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization,content-type,last-event-id",
    }


async def test_the_agui_mount_has_its_own_grant(make_client: MakeClient, user_token: str) -> None:
    """TETHER_AGUI_CORS_ORIGINS grants /agui (its answers, errors too), and only /agui."""
    client = await make_client(agui_cors_origins=frozenset({APP}))
    resp = await client.options("/agui/opspilot", headers=preflight(APP))
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == APP
    assert "Access-Control-Allow-Credentials" not in resp.headers, "never cookies"
    resp = await client.options("/agui/opspilot/runs/r1/events", headers=preflight(APP, "GET"))
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    resp = await client.post("/agui/opspilot", json={}, headers={"Origin": APP})
    assert resp.status == 401 and resp.headers["Access-Control-Allow-Origin"] == APP
    resp = await client.post(
        "/agui/opspilot", json={}, headers={"Origin": APP, "Authorization": f"Bearer {user_token}"}
    )
    assert resp.status == 400 and resp.headers["Access-Control-Allow-Origin"] == APP
    assert "Content-Location" in resp.headers["Access-Control-Expose-Headers"]
    resp = await client.options("/langgraph/assistants/search", headers=preflight(APP))
    assert "Access-Control-Allow-Origin" not in resp.headers, "the other mount's list is its own"
    with pytest.raises(UnsafeSettings, match="TETHER_AGUI_CORS_ORIGINS"):
        Settings.from_env({"TETHER_AGUI_CORS_ORIGINS": "*"})
