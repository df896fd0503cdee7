"""A LangGraph run's stream on the gateway's one SSE writer, and its final state (runs.wait,
runs.join): the Tether run's log through frames.py, for one stretch."""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import urlencode

import grpc
from aiohttp import web
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import TetherError

from tether_gateway.auth import Caller
from tether_gateway.bus_feed import BusStart
from tether_gateway.langgraph import ids, lookup
from tether_gateway.langgraph.frames import StretchFrames
from tether_gateway.log_source import log_source, run_log
from tether_gateway.sse import stream_response
from tether_gateway.state import GatewayState


def paths(thread_id: str, run_id: str, modes: frozenset[str]) -> dict[str, str]:
    """Relative to the mount: the SDK joins Location onto its base URL, path included. Location
    carries the stream's modes: the SDK reconnects to it as it is (Tether keeps no run's modes),
    and a reconnect must go on in the modes the stream began with."""
    query = urlencode([("stream_mode", m) for m in sorted(modes)])
    return {
        "Location": f"/threads/{thread_id}/runs/{run_id}/stream" + (f"?{query}" if query else ""),
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
    }


def _frames(
    thread_id: str,
    run: resources_pb2.Run,
    stretch: int,
    history: list[dict[str, Any]] | None,
    modes: frozenset[str],
    after: ids.Cursor = ids.START,
    *,
    graph: bool,
) -> StretchFrames:
    return StretchFrames(
        thread_id=thread_id,
        tether_run_id=run.id,
        stretch=stretch,
        history=history,
        modes=modes,
        after=after,
        graph=graph,
    )


async def serve_stream(
    request: web.Request,
    gw: GatewayState,
    caller: Caller,
    *,
    thread_id: str,
    run: resources_pb2.Run,
    stretch: int,
    modes: frozenset[str],
    after: ids.Cursor,
    slot: str | None,
    on_disconnect: str,
    started: float,
    graph: bool | None = None,
    on_bus: BusStart | None = None,
) -> web.StreamResponse:
    """The stretch's LangGraph events on the gateway's SSE writer (sse.py: heartbeats, the
    per-connection buffer, the token's expiry and revocation), fed from the Tether run's log
    (log_source.py: the runtime's stream, reopened on another runtime pod if one drains, or the
    bus for a run this request started there, `on_bus`). `graph`: whether the run is a graph
    agent's, when the caller knows (else ListAgents tells). `slot`: the caller's
    (StreamSlots.held, which gives it back if this raises)."""
    if graph is None:
        graph = await lookup.is_graph(gw.client(), caller.credential, run.agent)
    # A graph's run brings its state in its log: the thread's messages only if needed.
    history = None if graph else await lookup.history(gw.client(), caller.credential, run)
    frames = _frames(thread_id, run, stretch, history, modes, after, graph=graph)

    async def encoded(ev: events_pb2.RunEvent) -> list[bytes]:
        if frames.needs_history(ev):
            frames.set_history(await lookup.history(gw.client(), caller.credential, run))
        return [f.encode() for f in frames.feed(ev)]

    source = log_source(gw, caller, run.id, encoded, lambda: frames.done, on_bus)
    resp = await stream_response(
        request,
        gw,
        run_id=run.id,
        token=caller.credential,
        after=0,
        started=started,
        headers=paths(thread_id, frames.run_id, modes),
        slot=slot,
        expires_at=caller.expires_at,
        jtis=caller.jtis,
        source=source,
        bare_lines=True,  # the JS SDK would yield a lone heartbeat or `retry:` as an event
    )
    # The client went before the stretch ended (not this pod draining: its clients reconnect).
    if on_disconnect == "cancel" and not frames.done and not gw.draining:
        with contextlib.suppress(TetherError, grpc.aio.AioRpcError):
            await gw.client().cancel_run(
                rs.CancelRunRequest(run_id=run.id, reason="the client disconnected"),
                caller.credential,
            )
    return resp


async def final_values(
    gw: GatewayState,
    caller: Caller,
    thread_id: str,
    run: resources_pb2.Run,
    stretch: int,
    graph: bool | None = None,
    on_bus: BusStart | None = None,
) -> Any:
    """runs.wait / runs.join: the state when the stretch ends (with `__interrupt__` at an
    interrupt; `__error__` when the run failed). `graph`: whether the run is a graph agent's,
    when the caller knows (else ListAgents tells); `on_bus`: a run the wait started there."""
    if graph is None:
        graph = await lookup.is_graph(gw.client(), caller.credential, run.agent)
    history = None if graph else await lookup.history(gw.client(), caller.credential, run)
    frames = _frames(thread_id, run, stretch, history, frozenset(), graph=graph)
    last = 0
    error: dict[str, str] | None = None
    events = run_log(gw, caller, run.id, lambda: last, on_bus)
    async with contextlib.aclosing(events):
        async for batch in events:
            for ev in batch:
                last = ev.sequence
                if frames.needs_history(ev):
                    frames.set_history(await lookup.history(gw.client(), caller.credential, run))
                frames.feed(ev)
                if ev.WhichOneof("event") == "error" and frames.done:
                    error = {"error": ev.error.code, "message": ev.error.message}
                if frames.done:
                    break
            if frames.done:
                break
    if frames.needs_history(None):
        frames.set_history(await lookup.history(gw.client(), caller.credential, run))
    values = frames.values()
    if error is not None:
        values = (
            {**values, "__error__": error} if isinstance(values, dict) else {"__error__": error}
        )
    return values
