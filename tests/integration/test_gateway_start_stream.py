"""A POST that starts a run with `Accept: text/event-stream` is ONE gRPC call through the gateway
(StartRunAndStreamEvents); against a runtime older than the gateway, which does not implement
it, the gateway starts the run and streams it with two calls, as before. A counting gRPC proxy
between the gateway and a real runtime shows which calls went out."""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import grpc
import pytest
from tether_common.auth import issue_token
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

    def __init__(self, upstream: grpc.aio.Channel, refuse: frozenset[str]) -> None:
        self.upstream = upstream
        self.refuse = refuse
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


@pytest.fixture(params=["current", "older"])
async def through_proxy(
    request: pytest.FixtureRequest, base_env: dict[str, str], runtime_addr: str
) -> AsyncIterator[tuple[str, CountingProxy, Proc]]:
    refuse = frozenset({SERVICE + "StartRunAndStreamEvents"} if request.param == "older" else ())
    upstream = grpc.aio.insecure_channel(runtime_addr)
    proxy = CountingProxy(upstream, refuse)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((proxy,))
    addr = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(addr)
    await server.start()
    # In a thread: the gateway's readiness check goes through this loop's proxy.
    gw = await asyncio.to_thread(
        start_gateway, base_env, addr, name=f"gateway-start-stream-{request.param}"
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
    if kind == "current":
        assert proxy.calls == {"StartRunAndStreamEvents": 1}
    else:
        assert proxy.calls == {"StartRunAndStreamEvents": 1, "StartRun": 1, "StreamRunEvents": 1}


@pytest.mark.parametrize("through_proxy", ["current"], indirect=True)
async def test_the_starting_call_ends_when_its_client_leaves_at_once(
    through_proxy: tuple[str, CountingProxy, Proc], db: Any
) -> None:
    """The call that started the run is the run's shared feed on the gateway: when the client
    that started it leaves before reading anything, the feed (nobody joined, or everybody left)
    ends it after the linger, while the run itself waits on its approval."""
    _, proxy, gw = through_proxy
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
    assert proxy.streaming == 1
    deadline = asyncio.get_running_loop().time() + 15
    while proxy.streaming and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.1)
    assert proxy.streaming == 0, "the starting call outlived its feed"
    # The run did not depend on the connection (invariant 6): it went on to its approval.
    while asyncio.get_running_loop().time() < deadline + 15:
        status = await db.fetchval("SELECT status FROM run WHERE id = $1", run_id)
        if status == "interrupted":
            break
        await asyncio.sleep(0.1)
    assert status == "interrupted"
