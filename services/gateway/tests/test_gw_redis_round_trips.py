"""The gateway's calls to Redis on a request's path (the rate limit's check, a stream slot's
acquire and release) arm one timer a round trip, whatever the number of calls in it: the app's
client has no per-command socket timeout of redis-py's (a task and a timer per command written,
a timer per answer read), each round trip being bounded as a whole (script_batch.py). The
revocations' client keeps redis-py's bound, which its channel relies on."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from tether_common.config import Settings
from tether_gateway.app import create_app
from tether_gateway.state import STATE
from tether_testkit.loop_timers import count_timers

REDIS_URL = os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def test_a_requests_redis_calls_arm_one_timer_a_round_trip(
    aiohttp_client: Any, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    client: TestClient[Any, Any] = await aiohttp_client(
        # A long heartbeat: the slots' refresher (its calls go through a batch too) stays asleep.
        create_app(settings.model_copy(update={"redis_url": REDIS_URL, "sse_heartbeat_s": 60.0}))
    )
    gw = client.app[STATE]
    user = f"unit-{uuid.uuid4().hex}"
    old = await gw.slots.acquire(gw.redis, user)  # connected, the scripts loaded
    await gw.limiter.check(gw.redis, "start", user)
    # Counted in this task and the calls' own (the batch's drain), not in the app's background
    # tasks (the revocations' follower arms its own, on its own client, at any moment).
    test = asyncio.current_task()
    armed = count_timers(
        monkeypatch, lambda t: t is test or (t is not None and t.get_name() == "redis-script-calls")
    )
    await asyncio.gather(
        gw.limiter.check(gw.redis, "start", user),
        gw.slots.acquire(gw.redis, user),
        gw.slots.release(gw.redis, old),
    )
    assert len(armed) == 1, armed  # the round trip's bound, and nothing of redis-py's
    assert gw.redis.connection_pool.connection_kwargs["socket_timeout"] is None
    assert gw.revocations_redis.connection_pool.connection_kwargs["socket_timeout"] == 2.0
