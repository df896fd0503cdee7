"""The gateway's gRPC channel to the runtime: load-balanced, kept alive, unary calls bounded."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tether.runtime.v1 import runtime_service_pb2, runtime_service_pb2_grpc
from tether_common.errors import Unavailable
from tether_common.tracing import inject_carrier

UNARY_DEADLINE_S = 5.0
HEALTH_DEADLINE_S = 1.0
# Pings every 30 s keep NATs and idle SSE-backing streams alive; the runtime's server accepts
# pings this often (grpc.http2.min_ping_interval_without_data_ms <= 30 s), else it would GOAWAY.
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

# What a stream's read() returns at its end (the typing stubs do not know it).
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]

_SERVICE_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


def channel_target(target: str) -> str:
    """`host:port` with a DNS name becomes `dns:///host:port` so every resolved pod gets calls."""
    if "://" in target or target.startswith(("dns:", "unix:", "ipv4:", "ipv6:")):
        return target
    host = target.rsplit(":", 1)[0] if target.count(":") == 1 else target
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"dns:///{target}"
    return target


def channel_options() -> Sequence[tuple[str, Any]]:
    return (
        ("grpc.service_config", _SERVICE_CONFIG),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.enable_retries", 1),
    )


class RuntimeClient:
    """The stubs the handlers use, and the metadata that forwards the caller's bearer token."""

    def __init__(self, channel: grpc.aio.Channel, deadline_s: float = UNARY_DEADLINE_S) -> None:
        self.channel = channel
        self.deadline_s = deadline_s
        self.stub: Any = runtime_service_pb2_grpc.RuntimeServiceStub(channel)  # type: ignore[no-untyped-call]
        self._health = health_pb2_grpc.HealthStub(channel)

    @staticmethod
    def metadata(token: str) -> tuple[tuple[str, str], ...]:
        # The current trace (the browser's request) continues in the runtime.
        return (("authorization", f"Bearer {token}"), *inject_carrier().items())

    async def call(self, method: str, request: Any, token: str) -> Any:
        """One unary RPC by name, with the caller's token and the gateway's deadline."""
        rpc = getattr(self.stub, method)
        return await rpc(request, metadata=self.metadata(token), timeout=self.deadline_s)

    async def list_agents(self, token: str) -> runtime_service_pb2.ListAgentsResponse:
        resp: runtime_service_pb2.ListAgentsResponse = await self.call(
            "ListAgents", runtime_service_pb2.ListAgentsRequest(), token
        )
        return resp

    def stream_events(self, request: Any, token: str) -> Any:
        # No deadline: the stream lives as long as the run; keepalive detects dead peers.
        return self.stub.StreamRunEvents(request, metadata=self.metadata(token))

    async def start_run_streaming(self, request: Any, token: str) -> OpenedRun:
        """StartRunAndStreamEvents up to its first message (the run as started), within the
        unary deadline; the call then streams on without one, as StreamRunEvents does."""
        call = self.stub.StartRunAndStreamEvents(request, metadata=self.metadata(token))
        try:
            async with asyncio.timeout(self.deadline_s):
                first = await call.read()
        except TimeoutError:
            call.cancel()
            raise Unavailable("the runtime did not answer in time") from None
        except BaseException:
            call.cancel()
            raise
        if first is _EOF:  # a runtime never ends this call before its first message
            raise Unavailable("the runtime ended the call before starting the run")
        return OpenedRun(first, call)

    async def serving(self) -> bool:
        try:
            resp = await self._health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=HEALTH_DEADLINE_S
            )
        except grpc.aio.AioRpcError:
            return False
        return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


def open_channel(target: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(channel_target(target), options=channel_options())


@dataclass
class OpenedRun:
    """A started run's event stream, its first message read (it carries the run)."""

    first: runtime_service_pb2.StartRunAndStreamEventsResponse
    call: Any

    def close(self) -> None:
        self.call.cancel()


# A runtime pod that drains ends its streams (UNAVAILABLE / CANCELLED): reopen on another pod.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
MAX_RETRIES = 5


async def follow_events(
    client: Callable[[], RuntimeClient],
    run_id: str,
    token: str,
    position: Callable[[], int],
    opened: OpenedRun | None = None,
) -> AsyncGenerator[Sequence[Any], None]:
    """The run's events as StreamRunEvents batches, surviving the end of one runtime's stream:
    each (re)open resumes after `position()`, the last sequence the caller consumed. `opened`,
    a StartRunAndStreamEvents call, is followed first. The caller stops iterating at the
    terminal event; a stream that ends before it (the pod drained) is reopened, at most
    MAX_RETRIES times in a row."""
    retries = 0
    while True:
        if opened is not None:
            call, head = opened.call, opened.first.events
            opened = None
        else:
            request = runtime_service_pb2.StreamRunEventsRequest(
                run_id=run_id, after_sequence=position()
            )
            call, head = client().stream_events(request, token), None
        try:
            if head:
                yield head
            while (batch := await call.read()) is not _EOF:
                retries = 0
                yield batch.events
        except grpc.aio.AioRpcError as err:
            if err.code() not in RETRYABLE or retries >= MAX_RETRIES:
                raise
        finally:
            call.cancel()
        if retries >= MAX_RETRIES:
            return
        retries += 1
        await asyncio.sleep(0.1 * retries)
