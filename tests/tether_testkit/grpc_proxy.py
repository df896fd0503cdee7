"""A counting gRPC proxy between a gateway and a real runtime: which calls the gateway made
(tests/integration/test_gateway_start_stream.py, test_protocol_starts_on_bus.py). It forwards
every call as raw bytes and can play a runtime older than this one: answering UNIMPLEMENTED for
some methods, or taking StartRun as a runtime from before `run_id` did."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tether.runtime.v1 import runtime_service_pb2 as rs

from tether_testkit.processes import Proc, free_port, start_gateway

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
                await context.abort(
                    err.code(), err.details() or "", tuple(err.trailing_metadata() or ())
                )
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
                await context.abort(
                    err.code(), err.details() or "", tuple(err.trailing_metadata() or ())
                )
            finally:
                upstream.cancel()
                self.streaming -= 1

        return call


@contextlib.asynccontextmanager
async def gateway_through_proxy(
    env: dict[str, str],
    runtime_addr: str,
    name: str,
    *,
    refuse: frozenset[str] = frozenset(),
    ignore_run_id: bool = False,
) -> AsyncIterator[tuple[CountingProxy, Proc]]:
    """A gateway process whose runtime is `runtime_addr` behind a CountingProxy."""
    upstream = grpc.aio.insecure_channel(runtime_addr)
    proxy = CountingProxy(upstream, refuse, ignore_run_id=ignore_run_id)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((proxy,))
    addr = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(addr)
    await server.start()
    # In a thread: the gateway's readiness check goes through this loop's proxy.
    gw = await asyncio.to_thread(start_gateway, env, addr, name=name)
    try:
        yield proxy, gw
    finally:
        gw.terminate()
        await server.stop(None)
        await upstream.close()
