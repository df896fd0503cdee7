"""An AG-UI run's events on the gateway's one SSE writer (sse.py: heartbeats, the per-connection
buffer, the token's expiry and revocation), fed from the Tether run's log through
log_source.py and events.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson
from aiohttp import web
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs

from tether_gateway.agui import transcript
from tether_gateway.auth import Caller
from tether_gateway.bus_feed import BusStart
from tether_gateway.langgraph import lookup
from tether_gateway.log_source import log_source
from tether_gateway.sse import stream_response
from tether_gateway.state import GatewayState


class Encodable(Protocol):
    def encode(self) -> bytes: ...


class Mapper(Protocol):
    """What turns a Tether run's log into a protocol's SSE frames (AguiRun, the AI SDK's UiRun):
    `feed` the events in order from sequence 1; `done` once the client's part has ended; `facts`
    set before an event for which `snapshot_due` is true."""

    facts: dict[str, Any]

    @property
    def done(self) -> bool: ...

    def snapshot_due(self, ev: events_pb2.RunEvent) -> bool: ...

    def feed(self, ev: events_pb2.RunEvent) -> Sequence[Encodable]: ...


async def facts(gw: GatewayState, caller: Caller, conversation_id: str) -> dict[str, Any]:
    """The conversation's confirmed facts (STATE_SNAPSHOT's content)."""
    req = rs.GetConversationRequest(conversation_id=conversation_id)
    conv = (await gw.client().get_conversation(req, caller.credential)).conversation
    found = orjson.loads(conv.facts_json or "{}")
    return found if isinstance(found, dict) else {}


async def history(gw: GatewayState, caller: Caller, run: resources_pb2.Run) -> list[dict[str, Any]]:
    """The stored conversation before the run, as AG-UI messages (MESSAGES_SNAPSHOT)."""
    return [
        transcript.stored(m)
        for m in await lookup.stored_before(gw.client(), caller.credential, run)
    ]


def events_path(agent: str, run_id: str) -> str:
    return f"/agui/{agent}/runs/{run_id}/events"


async def nothing_left(
    gw: GatewayState, caller: Caller, run: resources_pb2.Run, mapper: Mapper
) -> bool:
    """Whether the AG-UI run is over and the client has all of it (a reconnect then gets 204):
    the log as it is now, fed through a copy of the client's mapper."""
    for ev in await lookup.read_log(gw.client(), caller.credential, run):
        if mapper.snapshot_due(ev):
            mapper.facts = {}  # the content does not matter here, only whether events are left
        if mapper.feed(ev):
            return False
        if mapper.done:
            return True
    return False


async def serve(
    request: web.Request,
    gw: GatewayState,
    caller: Caller,
    *,
    run: resources_pb2.Run,
    mapper: Mapper,
    slot: str | None,
    started: float,
    headers: dict[str, str],
    on_bus: BusStart | None = None,
) -> web.StreamResponse:
    """`on_bus`: a run this request started on the bus, followed there (log_source.py)."""

    async def frames(ev: events_pb2.RunEvent) -> list[bytes]:
        return await _frames(gw, caller, run, mapper, ev)

    source = log_source(gw, caller, run.id, frames, lambda: mapper.done, on_bus)
    return await stream_response(
        request,
        gw,
        run_id=run.id,
        token=caller.credential,
        after=0,
        started=started,
        headers=headers,
        slot=slot,
        expires_at=caller.expires_at,
        jtis=caller.jtis,
        source=source,
    )


async def _frames(
    gw: GatewayState,
    caller: Caller,
    run: resources_pb2.Run,
    mapper: Mapper,
    ev: events_pb2.RunEvent,
) -> list[bytes]:
    if mapper.snapshot_due(ev):
        mapper.facts = await facts(gw, caller, run.conversation_id)
    return [f.encode() for f in mapper.feed(ev)]
