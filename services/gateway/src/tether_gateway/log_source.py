"""A run's log as the source of a protocol's SSE stream (the LangGraph, AG-UI and AI SDK mounts):
followed from sequence 1 through runtime_client.follow_events (reopened on another runtime pod
if one drains), or, for a run the request started on the bus, from StartRun's answer and the
bus (bus_feed.BusStart), each event turned into frames by the protocol's mapper, a batch's
frames offered to the stream at once, until the mapper's part has ended or the client leaves. A
`reset` (the log gone under retention) ends it: nothing exact is left to send."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from tether.runtime.v1 import events_pb2

from tether_gateway.auth import Caller
from tether_gateway.bus_feed import Batches, BusStart
from tether_gateway.runtime_client import follow_events
from tether_gateway.sse import EventStream, Source
from tether_gateway.state import GatewayState

Frames = Callable[[events_pb2.RunEvent], Awaitable[list[bytes]]]
"""One event's encoded frames (a mapper may read what it needs first: history, facts)."""


def run_log(
    gw: GatewayState,
    caller: Caller,
    run_id: str,
    position: Callable[[], int],
    on_bus: BusStart | None = None,
) -> Batches:
    """The run's batches from its start, `position()` the last sequence the caller consumed: on
    the bus for a run this request started there (`on_bus`), else the runtime's stream."""

    def rest() -> Batches:
        return follow_events(gw.client, run_id, caller.credential, position)

    return rest() if on_bus is None else on_bus.follow(rest, gw.feeds.metrics_bus)


def log_source(
    gw: GatewayState,
    caller: Caller,
    run_id: str,
    frames: Frames,
    done: Callable[[], bool],
    on_bus: BusStart | None = None,
) -> Source:
    async def source(stream: EventStream) -> None:
        last = 0
        events = run_log(gw, caller, run_id, lambda: last, on_bus)
        async with contextlib.aclosing(events):
            async for batch in events:
                out: list[bytes] = []
                for ev in batch:
                    if ev.WhichOneof("event") == "reset":
                        return
                    last = ev.sequence
                    out.extend(await frames(ev))
                    if done():
                        break
                if out and not stream.offer(b"".join(out), len(out)):
                    return
                if done() or stream.client_gone():
                    return

    return source
