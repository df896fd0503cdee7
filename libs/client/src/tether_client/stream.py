"""A run's events as one exact sequence, whatever happens to the connections underneath.

`EventStream` follows StreamRunEvents and reopens it after the last sequence it yielded whenever
the stream breaks (UNAVAILABLE, a dropped connection, a runtime pod killed or draining, GOAWAY)
or ends without the run's terminal event, waiting with backoff between tries. Events at or
below that sequence are skipped, so the caller sees each sequence once, densely, in order. It
ends after the terminal event (`done`, `error`, `cancelled`).

A `reset` event (never stored; the runtime sends it when the resume point is past the run's
log) is yielded too: redraw from `event.reset.run`; the stream goes on after its
`last_sequence` (or ends, when that run is finished)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING

import grpc
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_proto import wire

from tether_client.errors import Unavailable, from_rpc_error
from tether_client.retry import RetryPolicy, stream_retryable
from tether_client.rpc import EOF_MARK, EventCall

if TYPE_CHECKING:
    from tether.runtime.v1.events_pb2 import RunEvent

TERMINAL_EVENTS = wire.TERMINAL_EVENT_TYPES
TERMINAL_STATUSES = wire.TERMINAL_RUN_STATUS_VALUES


def event_kind(event: events_pb2.RunEvent) -> str:
    """Which event it is: `run_started`, `text_delta`, `tool_started`, `tool_progress`,
    `tool_finished`, `interrupt`, `interrupt_resolved`, `done`, `error`, `cancelled`, `reset`."""
    return event.WhichOneof("event") or ""


def is_terminal(event: events_pb2.RunEvent) -> bool:
    return event_kind(event) in TERMINAL_EVENTS


class EventStream:
    """An async iterator of `RunEvent` (the protobuf message) for one run; see the module's
    docstring. `last_sequence` is the last sequence yielded (the point to resume after, even in
    another process); `reconnects` counts the reopenings. Close it (`aclose`, or `async with`)
    when leaving the loop early; a stream read to its end closes itself."""

    def __init__(
        self,
        run_id: str,
        after: int,
        open_call: Callable[[pb.StreamRunEventsRequest], Awaitable[EventCall]],
        get_run: Callable[[str], Awaitable[resources_pb2.Run]],
        policy: RetryPolicy,
    ) -> None:
        self.run_id = run_id
        self.last_sequence = after
        self.reconnects = 0
        self._open_call = open_call
        self._get_run = get_run
        self._policy = policy
        self._events = self._follow()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> RunEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _follow(self) -> AsyncGenerator[RunEvent, None]:
        failures = 0
        while True:
            request = pb.StreamRunEventsRequest(
                run_id=self.run_id, after_sequence=self.last_sequence
            )
            call = await self._open_call(request)
            try:
                while (batch := await call.read()) is not EOF_MARK:
                    for event in batch.events:  # type: ignore[attr-defined]
                        kind = event_kind(event)
                        if kind == "reset":
                            run = event.reset.run
                            self.last_sequence = run.last_sequence
                            failures = 0
                            yield event
                            if run.status in TERMINAL_STATUSES:
                                return
                            continue
                        if event.sequence <= self.last_sequence:
                            continue  # seen before the reconnect
                        self.last_sequence = event.sequence
                        failures = 0
                        yield event
                        if kind in TERMINAL_EVENTS:
                            return
                # Ended without the terminal event: a draining pod, or a run that was already
                # over at our resume point (the runtime then sends nothing at all).
                run = await self._get_run(self.run_id)
                if run.status in TERMINAL_STATUSES and run.last_sequence <= self.last_sequence:
                    return
                error: BaseException | None = None
            except grpc.aio.AioRpcError as err:
                if not stream_retryable(err):
                    raise from_rpc_error(err) from err
                error = err
            finally:
                call.cancel()
            failures += 1
            if failures > self._policy.stream_attempts:
                raise Unavailable(
                    f"the event stream of {self.run_id} broke {failures} times in a row"
                ) from error
            self.reconnects += 1
            await asyncio.sleep(self._policy.backoff(failures))
