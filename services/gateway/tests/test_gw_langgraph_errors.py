"""The /langgraph mount's refusals, before anything reaches the runtime: LangGraph's error shape
`{"detail": ...}`, 401 without a token, 422 for a body or a Last-Event-ID Tether cannot honour;
a repeated `stream_mode` is a list there, not an ambiguous parameter."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient


def auth(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


async def test_no_token_is_401_in_langgraphs_shape(client: TestClient[Any, Any]) -> None:
    resp = await client.post("/langgraph/assistants/search", json={})
    assert resp.status == 401
    body = await resp.json()
    assert body["detail"] and "error" not in body


async def test_assistants_are_the_loaded_agents(
    client: TestClient[Any, Any], user_token: str
) -> None:
    resp = await client.post("/langgraph/assistants/search", json={}, headers=auth(user_token))
    assert resp.status == 200
    found = await resp.json()
    assert [a["graph_id"] for a in found] == ["billing", "opspilot"]
    by_uuid = await client.get(
        f"/langgraph/assistants/{found[1]['assistant_id']}", headers=auth(user_token)
    )
    assert (await by_uuid.json())["name"] == "opspilot"
    missing = await client.get("/langgraph/assistants/nobody", headers=auth(user_token))
    assert missing.status == 404 and "nobody" in (await missing.json())["detail"]


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        {"input": {"messages": [{"role": "user", "content": "hi"}]}},
        {"assistant_id": "opspilot", "stream_mode": "telepathy"},
        {"assistant_id": "opspilot", "command": {"goto": "node"}},
        {"assistant_id": "opspilot", "on_disconnect": "explode"},
    ],
)
async def test_a_run_request_tether_cannot_honour_is_422(
    client: TestClient[Any, Any], user_token: str, body: Any
) -> None:
    kwargs = {"data": body} if isinstance(body, str) else {"json": body}
    resp = await client.post(
        "/langgraph/threads/conv_1/runs/stream", headers=auth(user_token), **kwargs
    )
    assert resp.status == 422, await resp.text()
    assert (await resp.json())["detail"]


async def test_a_last_event_id_this_gateway_never_sent_is_422(
    client: TestClient[Any, Any], user_token: str
) -> None:
    resp = await client.get(
        "/langgraph/threads/conv_1/runs/run_1/stream?stream_mode=values&stream_mode=updates",
        headers=auth(user_token, **{"Last-Event-ID": "yesterday"}),
    )
    assert resp.status == 422
    assert "Last-Event-ID" in (await resp.json())["detail"]


async def test_info(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/langgraph/info")
    assert resp.status == 200 and (await resp.json())["flags"]["assistants"] is True
