"""A POST that starts a run with `Accept: text/event-stream` is ONE gRPC call through the gateway:
with Redis, a StartRun under an id the gateway made and listens on, the run's events coming on
the bus (`bus_feed.py`, no stream held for the run); without the bus (TETHER_FEED_ON_BUS=false),
StartRunAndStreamEvents. Against a runtime older than the gateway, which ignores `run_id` or does
not implement StartRunAndStreamEvents, the gateway follows the run on StreamRunEvents, as before.
A counting gRPC proxy between the gateway and a real runtime shows which calls went out."""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
import redis.asyncio as redis
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.auth import issue_token
from tether_common.run_bus import channel
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

SERVICE = "/tether.runtime.v1.RuntimeService/"
STREAMING = {SERVICE + "StreamRunEvents", SERVICE + "StartRunAndStreamEvents"}
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
FORWARDED_METADATA = ("authorization", "traceparent", "tracestate")


class CountingProxy(grpc.GenericRpcHandler):
    """Forwards every call to the runtime as raw bytes and counts it; answers UNIMPLEMENTED (as
    an older runtime would) for the methods in `refuse`."""

    def __init__(
        self, upstream: grpc.aio.Channel, refuse: frozenset[str], *, ignore_run_id: bool = False
    ) -> None:
        self.upstream = upstream
        self.refuse = refuse
        self.ignore_run_id = ignore_run_id  # StartRun as a runtime from before `run_id` takes it
        self.calls: collections.Counter[str] = collections.Counter()
        self.streaming = 0  # streaming calls in flight

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = details.method  # type: ignore[attr-defined]
        self.calls[method.removeprefix(SERVICE)] += 1
        if method in self.refuse or method == HEALTH_WATCH:
            # grpc answers UNIMPLEMENTED; to the gateway channel's health watch
            # (tether_client.channel) that means "no health service: treat it as healthy".
            return None
        if method in STREAMING:
            return grpc.unary_stream_rpc_method_handler(self._streaming(method))
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    @staticmethod
    def _metadata(context: Any) -> tuple[tuple[str, str], ...]:
        md = context.invocation_metadata() or ()
        return tuple((k, v) for k, v in md if k in FORWARDED_METADATA)

    def _unary(self, method: str) -> Any:
        async def call(request: bytes, context: Any) -> bytes:
            if self.ignore_run_id and method == SERVICE + "StartRun":
                start = rs.StartRunRequest.FromString(request)
                start.ClearField("run_id")
                request = start.SerializeToString()
            try:
                return await self.upstream.unary_unary(method)(
                    request, metadata=self._metadata(context), timeout=10
                )
            except grpc.aio.AioRpcError as err:
                await context.abort(err.code(), err.details() or "", err.trailing_metadata())
                raise

        return call

    def _streaming(self, method: str) -> Any:
        async def call(request: bytes, context: Any) -> AsyncIterator[bytes]:
            upstream = self.upstream.unary_stream(method)(request, metadata=self._metadata(context))
            self.streaming += 1
            try:
                async for message in upstream:
                    yield message
            except grpc.aio.AioRpcError as err:
                await context.abort(err.code(), err.details() or "", err.trailing_metadata())
            finally:
                upstream.cancel()
                self.streaming -= 1

        return call


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
    upstream = grpc.aio.insecure_channel(runtime_addr)
    proxy = CountingProxy(upstream, refuse, ignore_run_id=ignore_run_id)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((proxy,))
    addr = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(addr)
    await server.start()
    # In a thread: the gateway's readiness check goes through this loop's proxy.
    gw = await asyncio.to_thread(
        start_gateway, {**base_env, **env}, addr, name=f"gateway-start-stream-{request.param}"
    )
    try:
        yield request.param, proxy, gw
    finally:
        gw.terminate()
        await server.stop(None)
        await upstream.close()


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
        assert await _bus_feeds(gw) == {"ended": 1.0}


async def _bus_feeds(gw: Proc) -> dict[str, float]:
    """tether_gateway_bus_feeds_total by outcome, from the gateway's /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"{gw.addr}/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        if line.startswith("tether_gateway_bus_feeds_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            out[outcome] = float(line.rsplit(" ", 1)[1])
    return out


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
        assert await _bus_feeds(gw) == {"left": 1.0}
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
