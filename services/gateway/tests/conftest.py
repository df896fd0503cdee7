"""Gateway unit-test fixtures: an app against a scripted runtime, and a signed user token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from gw_fake_runtime import SECRET, FakeRuntime, serve
from tether_common.auth import issue_token
from tether_common.config import Settings
from tether_gateway.app import create_app


@pytest.fixture
async def fake_runtime() -> AsyncIterator[tuple[FakeRuntime, str]]:
    fake = FakeRuntime()
    server, addr = await serve(fake)
    yield fake, addr
    await server.stop(0)


@pytest.fixture
def settings(fake_runtime: tuple[FakeRuntime, str]) -> Settings:
    return Settings(
        runtime_target=fake_runtime[1],
        redis_url="",
        jwt_secret=SECRET,
        sse_heartbeat_s=0.3,
        sse_retry_ms=1500,
        max_body_bytes=4096,
    )


@pytest.fixture
def user_token() -> str:
    return issue_token(SECRET, "alice")


@pytest.fixture
async def client(
    aiohttp_client: Callable[[Any], Awaitable[TestClient[Any, Any]]], settings: Settings
) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(settings))


@pytest.fixture
def make_client(
    aiohttp_client: Callable[[Any], Awaitable[TestClient[Any, Any]]], settings: Settings
) -> Callable[..., Awaitable[TestClient[Any, Any]]]:
    async def make(**changes: Any) -> TestClient[Any, Any]:
        return await aiohttp_client(create_app(settings.model_copy(update=changes)))

    return make
