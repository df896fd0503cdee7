"""Finding 8, trace context from the browser: a `traceparent` a client sends is not continued (the
gateway starts its own trace, and the runtime works in that one) but kept as a span link, and
its `baggage` never reaches the runtime. TETHER_TRUST_TRACEPARENT=1, for internal callers, does
continue it. Real runtime and gateway processes writing their spans to files, and a gRPC proxy
between them recording the metadata the runtime receives."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.security import bearer, new_user

LIST = "/tether.runtime.v1.RuntimeService/ListConversations"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"


class RecordingProxy(grpc.GenericRpcHandler):
    """Forwards unary calls to the runtime with their metadata, keeping each call's metadata."""

    def __init__(self, upstream: grpc.aio.Channel) -> None:
        self.upstream = upstream
        self.seen: list[tuple[str, dict[str, str]]] = []

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = details.method  # type: ignore[attr-defined]
        if method.endswith("Events") or method == HEALTH_WATCH:
            # Streams are not needed here. The gateway's channel watches each runtime's health
            # (tether_client.channel); UNIMPLEMENTED makes gRPC treat the proxy as healthy.
            return None

        async def call(request: bytes, context: Any) -> bytes:
            md = tuple(context.invocation_metadata() or ())
            self.seen.append((method, dict(md)))
            forwarded = tuple((k, v) for k, v in md if not k.startswith((":", "grpc-")))
            try:
                return await self.upstream.unary_unary(method)(
                    request, metadata=forwarded, timeout=10
                )
            except grpc.aio.AioRpcError as err:
                await context.abort(err.code(), err.details() or "", err.trailing_metadata())
                raise

        return grpc.unary_unary_rpc_method_handler(call)

    def last(self, method: str) -> dict[str, str]:
        """The metadata of the last call of `method`."""
        return next(md for m, md in reversed(self.seen) if m == method)


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trace_of(context: dict[str, Any]) -> str:
    return str(context["trace_id"]).removeprefix("0x")


@dataclass
class Traced:
    runtime: Proc
    proxy: RecordingProxy
    proxy_addr: str
    rt_trace: Path


@pytest.fixture
async def traced(base_env: dict[str, str], tmp_path: Path) -> AsyncIterator[Traced]:
    rt_trace = tmp_path / "runtime.jsonl"
    runtime = await asyncio.to_thread(
        start_runtime, {**base_env, "TETHER_TRACE_FILE": str(rt_trace)}, name="rt-traceparent"
    )
    upstream = grpc.aio.insecure_channel(runtime.addr)
    proxy = RecordingProxy(upstream)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((proxy,))
    proxy_addr = f"127.0.0.1:{free_port()}"
    server.add_insecure_port(proxy_addr)
    await server.start()
    try:
        yield Traced(runtime, proxy, proxy_addr, rt_trace)
    finally:
        await server.stop(None)
        await upstream.close()
        runtime.terminate()


async def _gateway(base_env: dict[str, str], traced: Traced, trace_file: Path, **env: str) -> Proc:
    # In a thread: the gateway's readiness check goes through this loop's proxy.
    return await asyncio.to_thread(
        start_gateway,
        {**base_env, "TETHER_TRACE_FILE": str(trace_file), **env},
        traced.proxy_addr,
        name="gateway-traceparent",
    )


async def _list_with_client_trace(gw: str, client_trace: str) -> None:
    headers = {
        **bearer(new_user("trace")),
        "traceparent": f"00-{client_trace}-{secrets.token_hex(8)}-01",
        "baggage": "tenant=evil,user.id=admin",
    }
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{gw}/v1/conversations", headers=headers) as r,
    ):
        assert r.status == 200, await r.text()


async def _runtime_span(traced: Traced, trace_id: str) -> dict[str, Any]:
    for _ in range(100):
        found = [
            s
            for s in spans(traced.rt_trace)
            if s["name"] == "RuntimeService/ListConversations"
            and trace_of(s["context"]) == trace_id
        ]
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no runtime span in trace {trace_id}")


async def test_a_browser_traceparent_is_linked_not_continued(
    base_env: dict[str, str], traced: Traced, tmp_path: Path
) -> None:
    gw_trace = tmp_path / "gateway.jsonl"
    gateway = await _gateway(base_env, traced, gw_trace)
    client_trace = secrets.token_hex(16)
    try:
        await _list_with_client_trace(gateway.addr, client_trace)
    finally:
        gateway.terminate()

    metadata = traced.proxy.last(LIST)
    sent_trace = metadata["traceparent"].split("-")[1]
    assert sent_trace != client_trace, "the runtime was handed the browser's trace"
    assert "baggage" not in metadata, "the browser's baggage reached the runtime"
    server_span = next(s for s in spans(gw_trace) if s["name"] == "GET /v1/conversations")
    assert trace_of(server_span["context"]) == sent_trace != client_trace
    assert server_span["parent_id"] is None, "the gateway's span has a parent from outside"
    assert [trace_of(link["context"]) for link in server_span["links"]] == [client_trace]
    runtime_span = await _runtime_span(traced, sent_trace)
    assert trace_of(runtime_span["context"]) != client_trace
    assert not any(trace_of(s["context"]) == client_trace for s in spans(traced.rt_trace))


async def test_internal_callers_trace_is_continued_when_trusted(
    base_env: dict[str, str], traced: Traced, tmp_path: Path
) -> None:
    gateway = await _gateway(
        base_env, traced, tmp_path / "gateway.jsonl", TETHER_TRUST_TRACEPARENT="1"
    )
    client_trace = secrets.token_hex(16)
    try:
        await _list_with_client_trace(gateway.addr, client_trace)
    finally:
        gateway.terminate()
    metadata = traced.proxy.last(LIST)
    assert metadata["traceparent"].split("-")[1] == client_trace
    assert "tenant=evil" in metadata.get("baggage", "")
    await _runtime_span(traced, client_trace)
