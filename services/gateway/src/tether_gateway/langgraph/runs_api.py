"""LangGraph's runs on a thread: create (background), stream, wait, join, join the stream (with
`Last-Event-ID`), get, list, cancel; and stateless runs (`/runs/stream`, `/runs/wait`) on a new
thread. A run request on a thread whose Tether run waits at an interrupt with
`command={"resume": v}` answers it (ResumeRun: the same Tether run continues, as a new LangGraph
run, the next stretch); otherwise it starts a Tether run from the input's last human message."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import grpc
from aiohttp import web
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import FailedPrecondition, InvalidArgument, TetherError

from tether_gateway.auth import Caller, authenticate
from tether_gateway.langgraph import answers, ids, lookup
from tether_gateway.langgraph.assistants_api import agent_named
from tether_gateway.langgraph.frames import StretchFrames
from tether_gateway.langgraph.run_request import RunRequest, input_text, run_request, stream_modes
from tether_gateway.langgraph.stretches import starts_stretch
from tether_gateway.langgraph.views import run_json
from tether_gateway.run_feed import TERMINAL_STATUSES
from tether_gateway.runtime_client import follow_events
from tether_gateway.sse import EventStream, stream_response
from tether_gateway.state import GatewayState, state
from tether_gateway.validation import compact_object, read_json

# A join without `stream_mode` gets these (Tether does not keep a run's modes).
JOIN_MODES = ("values", "updates", "messages-tuple", "custom")
CANCEL_WAIT_S = 30.0
MAX_INPUT_JSON = 64_000
_BUSY = frozenset(
    {
        resources_pb2.RUN_STATUS_QUEUED,
        resources_pb2.RUN_STATUS_RUNNING,
        resources_pb2.RUN_STATUS_WAITING,
    }
)


async def _caller(request: web.Request, gw: GatewayState) -> Caller:
    return await authenticate(request, gw.auth)


def _paths(thread_id: str, run_id: str) -> dict[str, str]:
    # Relative to the mount: the SDK joins Location onto its base URL, path included.
    return {
        "Location": f"/threads/{thread_id}/runs/{run_id}/stream",
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
    }


async def _begin(
    gw: GatewayState, caller: Caller, thread_id: str, req: RunRequest
) -> tuple[resources_pb2.Run, int]:
    """Resume the thread's interrupted Tether run, or start one: the Tether run and the stretch
    (the LangGraph run) the request made."""
    client = gw.client()
    agent = await agent_named(client, caller.credential, req.assistant_id)
    latest = await lookup.latest_run(client, caller.credential, thread_id)
    if req.has_resume:
        return await _resume(gw, caller, thread_id, latest, req)
    try:
        text = input_text(req.input)
    except InvalidArgument:
        if not req.input:
            raise
        text = ""  # a graph's own input: the runtime reads input_json (a native agent: 422)
    input_json = compact_object(req.input, "input", MAX_INPUT_JSON) if req.input else ""
    if latest is not None and latest.status in _BUSY and req.multitask_strategy == "reject":
        raise FailedPrecondition(
            "Thread is already running a task. Wait for it to finish or choose a different "
            "multitask strategy.",
            reason="RUN_ACTIVE",
        )
    started = await gw.client().start_run(
        rs.StartRunRequest(
            conversation_id=thread_id, text=text, agent=agent.name, input_json=input_json
        ),
        caller.credential,
    )
    return started.run, 0


async def _resume(
    gw: GatewayState,
    caller: Caller,
    thread_id: str,
    latest: resources_pb2.Run | None,
    req: RunRequest,
) -> tuple[resources_pb2.Run, int]:
    """ResumeRun on the thread's newest interrupt, keyed by the request: a doubled resume that
    comes after the first already resumed the run is answered by the runtime with the first
    (the same key and body), one that answers differently is refused (409), never a second
    answer; a thread with no interrupt to answer is a 409."""
    client = gw.client()
    interrupt = await _newest_interrupt(gw, caller, latest)
    await gw.limiter.check(gw.redis, "resume", caller.principal.user_id)
    ans = answers.answer(interrupt, req.resume)
    resumed = await client.resume_run(
        rs.ResumeRunRequest(
            run_id=interrupt.run_id,
            interrupt_id=interrupt.id,
            decision=ans.decision,  # type: ignore[arg-type]
            input=ans.input,
            value_json=ans.value_json,
            idempotency_key=answers.idempotency_key(thread_id, interrupt.id, req.resume),
        ),
        caller.credential,
    )
    return resumed.run, await _stretch_after(gw, caller, resumed.run, interrupt.id)


async def _newest_interrupt(
    gw: GatewayState, caller: Caller, latest: resources_pb2.Run | None
) -> resources_pb2.Interrupt:
    """The pending interrupt of the thread's newest run; once answered, the newest it raised
    (so that a repeated resume reaches the runtime, which replays the first answer)."""
    if latest is not None and latest.status == resources_pb2.RUN_STATUS_INTERRUPTED:
        return latest.pending_interrupt
    raised = None
    if latest is not None:
        for ev in await lookup.read_log(gw.client(), caller.credential, latest):
            if ev.WhichOneof("event") == "interrupt":
                raised = ev.interrupt
    if raised is None or latest is None:
        raise FailedPrecondition("the thread has no interrupt to resume")
    return resources_pb2.Interrupt(
        id=raised.interrupt_id, run_id=latest.id, kind=raised.kind, payload=raised.payload
    )


async def _stretch_after(
    gw: GatewayState, caller: Caller, run: resources_pb2.Run, interrupt_id: str
) -> int:
    """The stretch the answer to `interrupt_id` began (its InterruptResolved starts it)."""
    events = await lookup.read_log(gw.client(), caller.credential, run)
    stretch = 0
    for ev in events:
        if ev.WhichOneof("event") == "interrupt_resolved":
            if starts_stretch(ev):
                stretch += 1
            if ev.interrupt_resolved.interrupt_id == interrupt_id:
                return stretch
    raise TetherError("the answered interrupt is not in the run's log")


def _frames(
    thread_id: str,
    run: resources_pb2.Run,
    stretch: int,
    history: list[dict[str, Any]],
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


async def _serve_stream(
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
) -> web.StreamResponse:
    """The stretch's LangGraph events on the gateway's SSE writer (sse.py: heartbeats, the
    per-connection buffer, the token's expiry and revocation), fed from the Tether run's log
    through runtime_client.follow_events (reopened on another runtime pod if one drains)."""
    try:
        history = await lookup.history(gw.client(), caller.credential, run)
        graph = await lookup.is_graph(gw.client(), caller.credential, run.agent)
    except BaseException:
        await gw.slots.release(gw.redis, slot)
        raise
    frames = _frames(thread_id, run, stretch, history, modes, after, graph=graph)

    async def source(stream: EventStream) -> None:
        last = 0
        events = follow_events(gw.client, run.id, caller.credential, lambda: last)
        async with contextlib.aclosing(events):
            async for batch in events:
                out: list[bytes] = []
                for ev in batch:
                    if ev.WhichOneof("event") == "reset":
                        return  # the log is gone (retention): nothing exact to send
                    last = ev.sequence
                    out.extend(f.encode() for f in frames.feed(ev))
                    if frames.done:
                        break
                if out and not stream.offer(b"".join(out), len(out)):
                    return
                if frames.done or stream.client_gone():
                    return

    resp = await stream_response(
        request,
        gw,
        run_id=run.id,
        token=caller.credential,
        after=0,
        started=started,
        headers=_paths(thread_id, frames.run_id),
        slot=slot,
        expires_at=caller.expires_at,
        jtis=caller.jtis,
        source=source,
    )
    # The client went before the stretch ended (not this pod draining: its clients reconnect).
    if on_disconnect == "cancel" and not frames.done and not gw.draining:
        with contextlib.suppress(TetherError, grpc.aio.AioRpcError):
            await gw.client().cancel_run(
                rs.CancelRunRequest(run_id=run.id, reason="the client disconnected"),
                caller.credential,
            )
    return resp


async def _final_values(
    gw: GatewayState, caller: Caller, thread_id: str, run: resources_pb2.Run, stretch: int
) -> dict[str, Any]:
    """runs.wait / runs.join: the state when the stretch ends (with `__interrupt__` at an
    interrupt; `__error__` when the run failed)."""
    history = await lookup.history(gw.client(), caller.credential, run)
    graph = await lookup.is_graph(gw.client(), caller.credential, run.agent)
    frames = _frames(thread_id, run, stretch, history, frozenset(), graph=graph)
    last = 0
    error: dict[str, str] | None = None
    events = follow_events(gw.client, run.id, caller.credential, lambda: last)
    async with contextlib.aclosing(events):
        async for batch in events:
            for ev in batch:
                last = ev.sequence
                frames.feed(ev)
                if ev.WhichOneof("event") == "error" and frames.done:
                    error = {"error": ev.error.code, "message": ev.error.message}
                if frames.done:
                    break
            if frames.done:
                break
    values = frames.values()
    if error is not None:
        values["__error__"] = error
    return values


async def _body(request: web.Request, gw: GatewayState) -> RunRequest:
    return run_request(await read_json(request, gw.settings.max_body_bytes))


async def stream_run(request: web.Request) -> web.StreamResponse:
    gw = state(request)
    return await _stream(request, gw, await _caller(request, gw), request.match_info["thread_id"])


async def _stream(
    request: web.Request, gw: GatewayState, caller: Caller, thread_id: str
) -> web.StreamResponse:
    started = time.perf_counter()
    await gw.limiter.check(gw.redis, "start", caller.principal.user_id)
    req = await _body(request, gw)
    # The stream's slot first: a caller at the cap starts no run it could not watch.
    slot = await gw.slots.acquire(gw.redis, caller.principal.user_id)
    try:
        run, stretch = await _begin(gw, caller, thread_id, req)
    except BaseException:
        await gw.slots.release(gw.redis, slot)
        raise
    return await _serve_stream(
        request,
        gw,
        caller,
        thread_id=thread_id,
        run=run,
        stretch=stretch,
        modes=req.stream_mode,
        after=ids.START,
        slot=slot,
        on_disconnect=req.on_disconnect,
        started=started,
    )


async def join_stream(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "events", caller.principal.user_id)
    thread_id, run_id = request.match_info["thread_id"], request.match_info["run_id"]
    after = ids.cursor(request.headers.get("Last-Event-ID"))
    # httpx sends `stream_mode=` for none: the empty values are no modes.
    asked = [m for m in request.query.getall("stream_mode", []) if m]
    modes = stream_modes(asked or None, JOIN_MODES)
    cancel = request.query.get("cancel_on_disconnect", "false").lower() in ("1", "true")
    lg = await lookup.find_run(gw.client(), caller.credential, thread_id, run_id)
    slot = await gw.slots.acquire(gw.redis, caller.principal.user_id)
    return await _serve_stream(
        request,
        gw,
        caller,
        thread_id=thread_id,
        run=lg.run,
        stretch=lg.stretch.index,
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
    await gw.limiter.check(gw.redis, "start", caller.principal.user_id)
    req = await _body(request, gw)
    run, stretch = await _begin(gw, caller, thread_id, req)
    run_id = ids.stretch_run_id(run.id, stretch)
    values = await _final_values(gw, caller, thread_id, run, stretch)
    headers = {
        "Location": f"/threads/{thread_id}/runs/{run_id}/join",
        "Content-Location": f"/threads/{thread_id}/runs/{run_id}",
    }
    return web.json_response(values, headers=headers)


async def join_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    thread_id, run_id = request.match_info["thread_id"], request.match_info["run_id"]
    lg = await lookup.find_run(gw.client(), caller.credential, thread_id, run_id)
    return web.json_response(await _final_values(gw, caller, thread_id, lg.run, lg.stretch.index))


async def create_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "start", caller.principal.user_id)
    req = await _body(request, gw)
    thread_id = request.match_info["thread_id"]
    run, stretch = await _begin(gw, caller, thread_id, req)
    found = await lookup.lg_runs(gw.client(), caller.credential, thread_id, run)
    lg = found[min(stretch, len(found) - 1)]
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
