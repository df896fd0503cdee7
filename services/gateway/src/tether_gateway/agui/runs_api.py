"""AG-UI's endpoints: POST /agui/{agent} (a RunAgentInput in, the AG-UI run's events out over
SSE) and Tether's extension GET /agui/{agent}/runs/{runId}/events (the same run's events after
`Last-Event-ID`, exactly, then live; 204 once the run is over and the client has all of it).
The gateway's edge rules as on /v1: a bearer header or the session cookie (with CSRF on the
POST), the per-user rate limits (start, resume, events) and stream cap, heartbeats."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import FailedPrecondition, NotFound

from tether_gateway.agui import run_stream
from tether_gateway.agui.events import AguiRun
from tether_gateway.agui.run_input import client_id, run_input
from tether_gateway.agui.run_start import begin, stretch_after
from tether_gateway.auth import session_or_bearer
from tether_gateway.bus_feed import held
from tether_gateway.langgraph import ids, lookup
from tether_gateway.state import state
from tether_gateway.validation import read_json


async def run_agent(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await session_or_bearer(request, gw.auth)
    inp = run_input(await read_json(request, gw.settings.max_body_bytes))
    agent = request.match_info["agent"]
    user = caller.principal.user_id
    async with gw.slots.held(gw.redis, user, gate=gw.limiter.gate("start", user)) as slot:
        begun = await begin(gw, caller, agent, inp)
        with held(begun.on_bus):
            history = await run_stream.history(gw, caller, begun.run)
            mapper = AguiRun(
                thread_id=inp.thread_id, run_id=inp.run_id, stretch=begun.stretch, history=history
            )
            return await run_stream.serve(
                request,
                gw,
                caller,
                run=begun.run,
                mapper=mapper,
                slot=slot,
                started=started,
                headers={"Content-Location": run_stream.events_path(agent, inp.run_id)},
                on_bus=begun.on_bus,
            )


async def run_events(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await session_or_bearer(request, gw.auth)
    await gw.limiter.check(gw.redis, "events", caller.principal.user_id)
    agent = request.match_info["agent"]
    run_id = client_id(request.match_info["run_id"], "runId")
    after = ids.cursor(request.headers.get("Last-Event-ID"))
    client, token = gw.client(), caller.credential
    found = await client.get_run(rs.GetRunRequest(client_run_id=run_id), token)
    run = found.run
    if run.agent != agent:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")
    if run.events_expired:
        raise FailedPrecondition("the run's events are past retention: nothing to replay")
    stretch = 0
    if found.answered_interrupt_id:
        events = await lookup.read_log(client, token, run)
        stretch = stretch_after(events, found.answered_interrupt_id)

    def mapper(history: list[dict[str, Any]] | None = None) -> AguiRun:
        thread = found.client_conversation_id or run.conversation_id
        return AguiRun(
            thread_id=thread, run_id=run_id, stretch=stretch, after=after, history=history
        )

    if await run_stream.nothing_left(gw, caller, run, mapper()):
        return web.Response(status=204)
    history = await run_stream.history(gw, caller, run)
    async with gw.slots.held(gw.redis, caller.principal.user_id) as slot:
        return await run_stream.serve(
            request,
            gw,
            caller,
            run=run,
            mapper=mapper(history),
            slot=slot,
            started=started,
            headers={"Content-Location": run_stream.events_path(agent, run_id)},
        )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{agent}", run_agent)
    app.router.add_get("/{agent}/runs/{run_id}/events", run_events)
