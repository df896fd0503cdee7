"""A POST that starts a run with `Accept: text/event-stream` is ONE gRPC call through the gateway:
with Redis, a StartRun under an id the gateway made and listens on, the run's events coming on
the bus (`bus_feed.py`, no stream held for the run); without the bus (TETHER_FEED_ON_BUS=false),
StartRunAndStreamEvents. Against a runtime older than the gateway, which ignores `run_id` or does
not implement StartRunAndStreamEvents, the gateway follows the run on StreamRunEvents, as before.
A counting gRPC proxy between the gateway and a real runtime shows which calls went out."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio as redis
from tether_common.auth import issue_token
from tether_common.run_bus import channel
from tether_testkit.gateway_metrics import bus_feeds
from tether_testkit.grpc_proxy import SERVICE, CountingProxy, gateway_through_proxy
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader


@pytest.fixture(scope="module")
def runtime_addr(base_env: dict[str, str]) -> Iterator[str]:
    rt = start_runtime(base_env, name="runtime-start-stream")
    yield rt.addr
    rt.terminate()


# A gateway with the bus or without it, and a runtime as this one or older in the ways that
# matter: ignoring StartRun's `run_id`, or without StartRunAndStreamEvents.
KINDS = {
    "bus": ({}, frozenset[str](), False),
    "stream": ({"TETHER_FEED_ON_BUS": "false"}, frozenset[str](), False),
    "older-bus": ({}, frozenset({SERVICE + "StartRunAndStreamEvents"}), True),
    "older-stream": (
        {"TETHER_FEED_ON_BUS": "false"},
        frozenset({SERVICE + "StartRunAndStreamEvents"}),
        True,
    ),
}
CALLS = {
    "bus": {"StartRun": 1},
    "stream": {"StartRunAndStreamEvents": 1},
    "older-bus": {"StartRun": 1, "StreamRunEvents": 1},
    "older-stream": {"StartRunAndStreamEvents": 1, "StartRun": 1, "StreamRunEvents": 1},
}


@pytest.fixture(params=list(KINDS))
async def through_proxy(
    request: pytest.FixtureRequest, base_env: dict[str, str], runtime_addr: str
) -> AsyncIterator[tuple[str, CountingProxy, Proc]]:
    env, refuse, ignore_run_id = KINDS[request.param]
    async with gateway_through_proxy(
        {**base_env, **env},
        runtime_addr,
        f"gateway-start-stream-{request.param}",
        refuse=refuse,
        ignore_run_id=ignore_run_id,
    ) as (proxy, gw):
        yield request.param, proxy, gw


async def test_a_streaming_start_streams_the_whole_run(
    through_proxy: tuple[str, CountingProxy, Proc],
) -> None:
    kind, proxy, gw = through_proxy
    auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.post(f"{gw.addr}/v1/conversations", json={}, headers=auth) as r:
            assert r.status == 201, await r.text()
            conv = (await r.json())["conversation"]["id"]
        proxy.calls.clear()
        resp = await http.post(
            f"{gw.addr}/v1/conversations/{conv}/runs",
            json={"text": "stream 40 deltas", "idempotencyKey": uuid.uuid4().hex},
            headers={**auth, "Accept": "text/event-stream"},
        )
        assert resp.status == 201
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        run_id = resp.headers["X-Run-Id"]
        assert resp.headers["Location"] == f"/v1/runs/{run_id}"
        frames = await SseReader(resp).events_until("done")
        resp.release()
    events = [f for f in frames if f.kind == "event"]
    assert [int(f.id or 0) for f in events] == list(range(1, len(events) + 1))
    assert events[0].event == "run_started" and events[-1].event == "done"
    assert all(f.json["runId"] == run_id for f in events)
    text = "".join(f.json["delta"] for f in events if f.event == "text_delta")
    assert text == "".join(f"t{i} " for i in range(40))
    assert proxy.calls == CALLS[kind]
    if kind == "bus":
        assert await bus_feeds(gw) == {"ended": 1.0}


@pytest.mark.parametrize("through_proxy", ["bus", "stream"], indirect=True)
async def test_the_starting_call_ends_when_its_client_leaves_at_once(
    through_proxy: tuple[str, CountingProxy, Proc], db: Any, redis_url: str
) -> None:
    """The call that started the run (or the bus subscription made for it) is the run's shared
    feed on the gateway: when the client that started it leaves before reading anything, the
    feed (nobody joined, or everybody left) ends it after the linger, while the run itself waits
    on its approval. On the bus, the run waiting is quiet but not behind (the positioning check),
    so it stays there, holding no stream of the runtime's, until the linger ends it."""
    kind, proxy, gw = through_proxy
    service, _ = await abnormal_service(db, prefix="leave")
    auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.post(f"{gw.addr}/v1/conversations", json={}, headers=auth) as r:
            conv = (await r.json())["conversation"]["id"]
        resp = await http.post(
            f"{gw.addr}/v1/conversations/{conv}/runs",
            json={"text": f"restart the abnormal {service} instance"},
            headers={**auth, "Accept": "text/event-stream"},
        )
        assert resp.status == 201
        run_id = resp.headers["X-Run-Id"]
        resp.close()  # gone before the first event
    if kind == "stream":
        assert proxy.streaming == 1
    deadline = asyncio.get_running_loop().time() + 15
    while (
        proxy.streaming or await _subscribers(redis_url, run_id)
    ) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    assert proxy.streaming == 0, "the starting call outlived its feed"
    assert await _subscribers(redis_url, run_id) == 0, "the run's subscription outlived its feed"
    if kind == "bus":
        assert proxy.calls["StreamRunEvents"] == 0 and proxy.calls["GetRunPositions"] >= 1
        assert await bus_feeds(gw) == {"left": 1.0}
    # The run did not depend on the connection (invariant 6): it went on to its approval.
    while asyncio.get_running_loop().time() < deadline + 15:
        status = await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)
        if status == "interrupted":
            break
        await asyncio.sleep(0.1)
    assert status == "interrupted"


async def _subscribers(redis_url: str, run_id: str) -> int:
    client = redis.from_url(redis_url)
    try:
        [(_, n)] = await client.pubsub_numsub(channel(run_id))
        return int(n)
    finally:
        await client.aclose()
