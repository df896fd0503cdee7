"""The /langgraph mount for a browser page on another origin: CORS granted to the listed
origins only (TETHER_LANGGRAPH_CORS_ORIGINS), with the headers the JS SDK reads exposed; and its
SSE heartbeat and `retry:` as lines of the next block, never a block of their own (the JS SDK
yields any block as an event, an empty one for a lone comment)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings
from tether_gateway.app import create_app
from tether_gateway.sse import EventStream, stream_response
from tether_gateway.state import state

APP = "http://app.example.test:5173"
MakeClient = Callable[..., Awaitable[TestClient[Any, Any]]]


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization,content-type,last-event-id",
    }


async def test_a_listed_origin_is_granted_the_preflight_and_the_answer(
    make_client: MakeClient, user_token: str
) -> None:
    client = await make_client(langgraph_cors_origins=frozenset({APP}))
    resp = await client.options("/langgraph/threads/t_1/runs/stream", headers=preflight(APP))
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    assert (
        resp.headers["Access-Control-Allow-Headers"] == "authorization,content-type,last-event-id"
    )
    assert "Access-Control-Allow-Credentials" not in resp.headers, "never cookies"
    resp = await client.post(
        "/langgraph/assistants/search",
        json={},
        headers={"Origin": APP, "Authorization": f"Bearer {user_token}"},
    )
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    exposed = resp.headers["Access-Control-Expose-Headers"]
    assert "Content-Location" in exposed and "Location" in exposed
    # An error is readable too (the page shows LangGraph's `detail`).
    resp = await client.post("/langgraph/assistants/search", json={}, headers={"Origin": APP})
    assert resp.status == 401 and resp.headers["Access-Control-Allow-Origin"] == APP


@pytest.mark.parametrize("listed", [frozenset(), frozenset({APP})])
async def test_another_origin_is_granted_nothing(
    make_client: MakeClient, user_token: str, listed: frozenset[str]
) -> None:
    client = await make_client(langgraph_cors_origins=listed)
    other = "http://evil.example.test"
    resp = await client.options("/langgraph/assistants/search", headers=preflight(other))
    assert "Access-Control-Allow-Origin" not in resp.headers
    resp = await client.post(
        "/langgraph/assistants/search",
        json={},
        headers={"Origin": other, "Authorization": f"Bearer {user_token}"},
    )
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_only_the_mount_is_granted(make_client: MakeClient, user_token: str) -> None:
    client = await make_client(langgraph_cors_origins=frozenset({APP}))
    resp = await client.get(
        "/v1/conversations", headers={"Origin": APP, "Authorization": f"Bearer {user_token}"}
    )
    assert "Access-Control-Allow-Origin" not in resp.headers


@pytest.mark.parametrize(
    "value", ["*", "app.example.test", "http://app.example.test/", "https://a.test/path", "ftp://a"]
)
def test_an_origin_setting_that_is_no_origin_is_refused(value: str) -> None:
    with pytest.raises(UnsafeSettings, match="TETHER_LANGGRAPH_CORS_ORIGINS"):
        Settings.from_env({"TETHER_LANGGRAPH_CORS_ORIGINS": f"https://ok.test,{value}"})


def test_origins_are_read_comma_separated() -> None:
    settings = Settings.from_env(
        {"TETHER_LANGGRAPH_CORS_ORIGINS": "https://a.test, http://127.0.0.1:5173,http://[::1]:80"}
    )
    assert settings.langgraph_cors_origins == {
        "https://a.test",
        "http://127.0.0.1:5173",
        "http://[::1]:80",
    }


@pytest.mark.parametrize("bare", [True, False])
async def test_bare_lines_put_heartbeats_and_retry_in_the_next_block(
    aiohttp_client: Callable[[Any], Awaitable[TestClient[Any, Any]]],
    settings: Settings,
    bare: bool,
) -> None:
    async def source(stream: EventStream) -> None:
        await asyncio.sleep(0.8)  # the heartbeat is every 0.3 s
        stream.offer(b"event: metadata\ndata: {}\nid: 1-0\n\n", 1)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream_response(
            request,
            state(request),
            run_id="run_1",
            token="t",
            after=0,
            started=time.perf_counter(),
            source=source,
            bare_lines=bare,
        )

    app = create_app(settings)
    app.router.add_get("/test-stream", handler)
    client = await aiohttp_client(app)
    body = await (await client.get("/test-stream")).text()
    blocks = [b for b in body.split("\n\n") if b]
    assert body.count(": keep-alive") >= 2, body
    if bare:
        # One block: its event's, with the retry and the heartbeats as lines of it.
        assert len(blocks) == 1 and blocks[0].startswith("retry: 1500\n: keep-alive\n"), body
        assert blocks[0].endswith("event: metadata\ndata: {}\nid: 1-0"), body
    else:
        assert blocks[0] == "retry: 1500" and blocks[1] == ": keep-alive", body
