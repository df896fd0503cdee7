"""LangGraph's runs on a thread: create (background), stream, wait, join, join the stream (with
`Last-Event-ID`), get, list, cancel; and stateless runs (`/runs/stream`, `/runs/wait`) on a new
thread. The handlers translate: run_start.py starts or resumes, run_stream.py streams."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import FailedPrecondition, InvalidArgument, TetherError

from tether_gateway.auth import Caller, authenticate
from tether_gateway.bus_feed import held
from tether_gateway.langgraph import ids, lookup
from tether_gateway.langgraph.run_request import (
    RunRequest,
    query_modes,
    run_request,
    stream_modes,
)
from tether_gateway.langgraph.run_start import begin
from tether_gateway.langgraph.run_stream import final_values, serve_stream
from tether_gateway.langgraph.views import run_json
from tether_gateway.run_feed import TERMINAL_STATUSES
from tether_gateway.state import GatewayState, state
from tether_gateway.validation import read_json

# A join without `stream_mode` gets these (Tether does not keep a run's modes).
JOIN_MODES = ("values", "updates", "messages-tuple", "custom")
CANCEL_WAIT_S = 30.0


async def _caller(request: web.Request, gw: GatewayState) -> Caller:
    return await authenticate(request, gw.auth)


async def _body(request: web.Request, gw: GatewayState) -> RunRequest:
    return run_request(await read_json(request, gw.settings.max_body_bytes))


async def stream_run(request: web.Request) -> web.StreamResponse:
    gw = state(request)
    return await _stream(request, gw, await _caller(request, gw), request.match_info["thread_id"])


async def _stream(
    request: web.Request, gw: GatewayState, caller: Caller, thread_id: str
) -> web.StreamResponse:
    started = time.perf_counter()
    req = await _body(request, gw)
    user = caller.principal.user_id
    async with gw.slots.held(gw.redis, user, gate=gw.limiter.gate("start", user)) as slot:
        begun = await begin(gw, caller, thread_id, req, reads=True)
        with held(begun.on_bus):
            return await serve_stream(
                request,
                gw,
                caller,
                thread_id=thread_id,
                run=begun.run,
                stretch=begun.stretch,
                modes=req.stream_mode,
                after=ids.START,
                slot=slot,
                on_disconnect=req.on_disconnect,
                started=started,
                graph=begun.graph,
                on_bus=begun.on_bus,
            )


async def join_stream(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "events", caller.principal.user_id)
    thread_id, run_id = request.match_info["thread_id"], request.match_info["run_id"]
    after = ids.cursor(request.headers.get("Last-Event-ID"))
    # httpx sends `stream_mode=` for none: the empty values are no modes.
    asked = query_modes(request.query.getall("stream_mode", []))
    modes = stream_modes(asked or None, JOIN_MODES)
    cancel = request.query.get("cancel_on_disconnect", "false").lower() in ("1", "true")
    run, stretch = await lookup.find_stretch(gw.client(), caller.credential, thread_id, run_id)
    async with gw.slots.held(gw.redis, caller.principal.user_id) as slot:
        return await serve_stream(
            request,
            gw,
            caller,
            thread_id=thread_id,
            run=run,
            stretch=stretch,
            modes=modes,
            after=after,
            slot=slot,
            on_disconnect="cancel" if cancel else "continue",
            started=started,
        )


async def wait_run(request: web.Request) -> web.Response:
    gw = state(request)
    return await _wait(request, gw, await _caller(request, gw), request.match_info["thread_id"])


async def _wait(
    request: web.Request, gw: GatewayState, caller: Caller, thread_id: str
) -> web.Response:
    req = await _body(request, gw)  # bad input first: it spends nothing of the budget
    await gw.limiter.check(gw.redis, "start", caller.principal.user_id)
    begun = await begin(gw, caller, thread_id, req, reads=True)
    run_id = ids.stretch_run_id(begun.run.id, begun.stretch)
    with held(begun.on_bus):
        values = await final_values(
            gw, caller, thread_id, begun.run, begun.stretch, begun.graph, begun.on_bus
        )
    headers = {
        "Location": f"/threads/{thread_id}/runs/{run_id}/join",
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
    }
    return web.json_response(values, headers=headers)


async def join_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    thread_id, run_id = request.match_info["thread_id"], request.match_info["run_id"]
    run, stretch = await lookup.find_stretch(gw.client(), caller.credential, thread_id, run_id)
    return web.json_response(await final_values(gw, caller, thread_id, run, stretch))


async def create_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    req = await _body(request, gw)  # bad input first: it spends nothing of the budget
    await gw.limiter.check(gw.redis, "start", caller.principal.user_id)
    thread_id = request.match_info["thread_id"]
    begun = await begin(gw, caller, thread_id, req)
    found = await lookup.lg_runs(gw.client(), caller.credential, thread_id, begun.run)
    lg = found[min(begun.stretch, len(found) - 1)]
    headers = {"Content-Location": f"/threads/{thread_id}/runs/{lg.run_id}"}
    return web.json_response(run_json(lg), headers=headers)


async def get_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    thread_id, run_id = request.match_info["thread_id"], request.match_info["run_id"]
    lg = await lookup.find_run(gw.client(), caller.credential, thread_id, run_id)
    return web.json_response(run_json(lg))


def _int_query(request: web.Request, name: str, default: int, most: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) > most:
        raise InvalidArgument(f"{name} must be a number from 0 to {most}")
    return int(raw)


async def list_runs(request: web.Request) -> web.Response:
    """The thread's LangGraph runs, newest first (a Tether run's stretches newest first)."""
    gw = state(request)
    caller = await _caller(request, gw)
    thread_id = request.match_info["thread_id"]
    limit = _int_query(request, "limit", 10, 200)
    offset = _int_query(request, "offset", 0, 10_000)
    status = request.query.get("status")
    client = gw.client()
    out: list[dict[str, Any]] = []
    skipped = 0
    for run in await lookup.thread_runs(client, caller.credential, thread_id):
        for lg in reversed(await lookup.lg_runs(client, caller.credential, thread_id, run)):
            if status and lg.status != status:
                continue
            if skipped < offset:
                skipped += 1
                continue
            out.append(run_json(lg))
            if len(out) >= limit:
                return web.json_response(out)
    return web.json_response(out)


async def cancel_run(request: web.Request) -> web.Response:
    """Cancel the Tether run under a pending or running LangGraph run; `?wait=1` returns once
    it has ended (the worker noticed the cancel), not merely once it was asked to."""
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "cancel", caller.principal.user_id)
    thread_id, run_id = request.match_info["thread_id"], request.match_info["run_id"]
    action = request.query.get("action", "interrupt")
    if action not in ("interrupt", "rollback"):
        raise InvalidArgument("action must be interrupt or rollback")
    lg = await lookup.find_run(gw.client(), caller.credential, thread_id, run_id)
    if lg.status not in ("pending", "running"):
        raise FailedPrecondition(
            f"run {run_id} is {lg.status}: only a pending or running run is cancelled"
        )
    req = rs.CancelRunRequest(run_id=lg.run.id, reason=f"langgraph cancel ({action})")
    resp = await gw.client().cancel_run(req, caller.credential)
    if request.query.get("wait", "0") in ("1", "true"):
        run = resp.run
        deadline = time.monotonic() + CANCEL_WAIT_S
        while run.status not in TERMINAL_STATUSES and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            run = (
                await gw.client().get_run(rs.GetRunRequest(run_id=run.id), caller.credential)
            ).run
        if run.status not in TERMINAL_STATUSES:
            raise TetherError("the run did not end in time", reason="UNAVAILABLE")
    return web.Response(status=202 if request.query.get("wait", "0") == "0" else 204)


async def _new_thread(gw: GatewayState, caller: Caller) -> str:
    resp = await gw.client().create_conversation(
        rs.CreateConversationRequest(title="langgraph stateless run"), caller.credential
    )
    return resp.conversation.id


async def stateless_stream(request: web.Request) -> web.StreamResponse:
    gw = state(request)
    caller = await _caller(request, gw)
    return await _stream(request, gw, caller, await _new_thread(gw, caller))


async def stateless_wait(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    return await _wait(request, gw, caller, await _new_thread(gw, caller))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/threads/{thread_id}/runs", create_run)
    app.router.add_get("/threads/{thread_id}/runs", list_runs)
    app.router.add_post("/threads/{thread_id}/runs/stream", stream_run)
    app.router.add_post("/threads/{thread_id}/runs/wait", wait_run)
    app.router.add_get("/threads/{thread_id}/runs/{run_id}", get_run)
    app.router.add_get("/threads/{thread_id}/runs/{run_id}/stream", join_stream)
    app.router.add_get("/threads/{thread_id}/runs/{run_id}/join", join_run)
    app.router.add_post("/threads/{thread_id}/runs/{run_id}/cancel", cancel_run)
    app.router.add_post("/runs/stream", stateless_stream)
    app.router.add_post("/runs/wait", stateless_wait)
