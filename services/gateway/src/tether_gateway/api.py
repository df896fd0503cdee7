"""The browser's JSON API (DESIGN section 5): JSON <-> gRPC, forwarding the caller's token."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import grpc
from aiohttp import web
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common import input_parsers
from tether_common.auth import issue_token
from tether_common.errors import InvalidArgument, NotFound
from tether_common.event_json import run_json, sse_frame
from tether_common.input_parsers import MAX_IDEMPOTENCY_KEY
from tether_proto import wire

from tether_gateway import csrf
from tether_gateway.audit_api import query_time
from tether_gateway.auth import SESSION_COOKIE, Caller, authenticate, session_or_bearer
from tether_gateway.bus_feed import BusStart, start_on_bus
from tether_gateway.run_feed import TERMINAL_STATUSES
from tether_gateway.runtime_client import Credential, OpenedRun
from tether_gateway.sse import is_finished, stream_response
from tether_gateway.state import GatewayState, state
from tether_gateway.validation import (
    MAX_GRAPH_JSON,
    Field,
    body,
    compact_json,
    compact_object,
    page_size,
    read_json,
    take,
    validate,
)
from tether_gateway.views import agent_json, conversation_json, message_json

DEV_TOKEN_TTL_S = 12 * 3600.0
MAX_ANSWER_CHARS = 8000

CREATE_CONVERSATION = {"title": Field(max_len=200)}
AGENT_NAME = r"[a-z0-9_-]{1,64}"
START_RUN = {
    # `text`, or `input` (a graph's input object, taken out before this check), or both.
    "text": Field(max_len=8000),
    "idempotencyKey": Field(max_len=MAX_IDEMPOTENCY_KEY),
    # Optional: the runtime's default agent when left out; an unknown one is AGENT_NOT_FOUND.
    "agent": Field(max_len=64, pattern=AGENT_NAME),
}
RESUME_RUN = {
    "interruptId": Field(required=True, max_len=64),
    "decision": Field(
        required=True,
        # approve, reject, respond, and retry / mark_done / abandon for an outcome_unknown
        # interrupt: the protos' answer words (tether_proto.wire.ANSWERS).
        choices=tuple(wire.ANSWERS),
    ),
    # With `respond`, the answer's content is one of: `input` (text as it goes to the runtime),
    # `option` (a select_option's chosen value) or `fill` (a provide_input's JSON object).
    "input": Field(max_len=MAX_ANSWER_CHARS),
    "option": Field(max_len=500),
    "idempotencyKey": Field(required=True, max_len=MAX_IDEMPOTENCY_KEY),
}
CANCEL_RUN = {"reason": Field(max_len=500)}
DEV_TOKEN = {"user": Field(required=True, max_len=64)}


def _json(data: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


async def _caller(request: web.Request, gw: GatewayState) -> Caller:
    return await session_or_bearer(request, gw.auth)


async def _body(request: web.Request, gw: GatewayState, schema: dict[str, Field]) -> dict[str, str]:
    return await body(request, schema, gw.settings.max_body_bytes)


def wants_stream(request: web.Request) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


async def create_conversation(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "conversation", caller.principal.user_id)
    data = await _body(request, gw, CREATE_CONVERSATION)
    req = rs.CreateConversationRequest(title=data.get("title", ""))
    resp = await gw.client().create_conversation(req, caller.token)
    return _json({"conversation": conversation_json(resp.conversation)}, 201)


async def list_conversations(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    req = rs.ListConversationsRequest(
        page_size=page_size(request), page_token=request.query.get("pageToken", "")
    )
    resp = await gw.client().list_conversations(req, caller.token)
    return _json(
        {
            "conversations": [conversation_json(c) for c in resp.conversations],
            "nextPageToken": resp.next_page_token or None,
        }
    )


async def get_conversation(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    req = rs.GetConversationRequest(conversation_id=request.match_info["id"])
    resp = await gw.client().get_conversation(req, caller.token)
    return _json({"conversation": conversation_json(resp.conversation)})


async def delete_conversation(request: web.Request) -> web.Response:
    """Everything of the conversation deleted (its audit records kept, masked): 204; 409
    RUN_ACTIVE while one of its runs is running."""
    gw = state(request)
    caller = await _caller(request, gw)
    req = rs.DeleteConversationRequest(conversation_id=request.match_info["id"])
    await gw.client().delete_conversation(req, caller.token)
    return web.Response(status=204)


async def list_messages(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    req = rs.ListMessagesRequest(
        conversation_id=request.match_info["id"],
        page_size=page_size(request, default=100, maximum=500),
        page_token=request.query.get("pageToken", ""),
    )
    resp = await gw.client().list_messages(req, caller.token)
    return _json(
        {
            "messages": [message_json(m) for m in resp.messages],
            "nextPageToken": resp.next_page_token or None,
        }
    )


async def list_agents(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    resp = await gw.client().list_agents(caller.token)
    return _json(
        {"agents": [agent_json(a) for a in resp.agents], "defaultAgent": resp.default_agent}
    )


async def start_run(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await _caller(request, gw)
    raw = await read_json(request, gw.settings.max_body_bytes)
    # `input` is the one field that is not a string: taken out before the string fields' check.
    has_input, graph_input = take(raw, "input")
    data = validate(raw, START_RUN)
    input_json = ""
    if has_input:
        input_json = compact_object(graph_input, "input", MAX_GRAPH_JSON)
        if graph_input == {}:
            raise InvalidArgument("field 'input' must not be empty")
    if not data.get("text", "").strip() and not input_json:
        raise InvalidArgument("give field 'text' or field 'input' (a graph's input object)")
    fields = {
        "conversation_id": request.match_info["id"],
        "text": data.get("text", ""),
        "idempotency_key": data.get("idempotencyKey", ""),
        "agent": data.get("agent", ""),
        "input_json": input_json,
    }
    opened: OpenedRun | None = None
    started_on_bus: BusStart | None = None
    answer: rs.StartRunResponse | None = None
    streaming = wants_stream(request)
    user = caller.principal.user_id
    # The rate limit (a request refused by validation counts nothing), with the stream's slot.
    gate = gw.limiter.gate("start", user)
    async with gw.slots.held(gw.redis, user, wanted=streaming, gate=gate) as slot:
        if streaming:
            # The run followed on the bus (bus_feed.py) where there is one; else one call
            # starts the run and streams it (a runtime older than that lacks it).
            on_bus = await start_on_bus(
                gw.bus,
                lambda req: gw.client().start_run(req, caller.token),
                rs.StartRunRequest(**fields),
            )
            if on_bus is not None:
                answer, started_on_bus = on_bus
            else:
                req = rs.StartRunAndStreamEventsRequest(**fields)
                opened = await _start_streaming(gw, req, caller)
        if opened is not None:
            run, replayed = opened.first.run, opened.first.replayed
        else:
            if answer is None:
                answer = await gw.client().start_run(rs.StartRunRequest(**fields), caller.token)
            run, replayed = answer.run, answer.replayed
        location = f"/v1/runs/{run.id}"
        # The connection below joins the run's feed, made here from the start.
        if opened is not None:
            gw.feeds.adopt(run.id, caller.token, opened)
        elif started_on_bus is not None:
            gw.feeds.adopt_listened(run.id, caller.token, started_on_bus)
        if streaming:
            return await stream_response(
                request,
                gw,
                run_id=run.id,
                token=caller.token,
                after=0,
                started=started,
                status=201,
                headers={"Location": location, "X-Run-Id": run.id},
                slot=slot,
                expires_at=caller.expires_at,
                jtis=caller.jtis,
            )
    body_json = {"run": run_json(run), "replayed": replayed}
    return web.json_response(body_json, status=201, headers={"Location": location})


async def _start_streaming(
    gw: GatewayState, req: rs.StartRunAndStreamEventsRequest, caller: Caller
) -> OpenedRun | None:
    """StartRunAndStreamEvents; None from a runtime that does not implement it."""
    try:
        return await gw.client().start_run_streaming(req, caller.token)
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        return None


async def get_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    req = rs.GetRunRequest(run_id=request.match_info["id"])
    resp = await gw.client().get_run(req, caller.token)
    return _json({"run": run_json(resp.run)})


_RUN_STATUS_FILTER = wire.RUN_STATUS.values


def _filter_text(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if len(value) > 200:
        raise InvalidArgument(f"{name} is longer than 200 characters")
    return value


async def list_runs(request: web.Request) -> web.Response:
    """The caller's runs, newest first; `?conversationId=`, `?status=`, `?agent=` and
    `?since=` / `?until=` (RFC 3339, creation time) narrow the list; `?userId=` (another user's
    id, or `-` for everyone's) takes the grant `runs.read` on `*`, checked by the runtime."""
    gw = state(request)
    caller = await _caller(request, gw)
    status = request.query.get("status")
    if status is not None and status not in _RUN_STATUS_FILTER:
        raise InvalidArgument(f"status must be one of {', '.join(_RUN_STATUS_FILTER)}")
    req = rs.ListRunsRequest(
        conversation_id=request.query.get("conversationId", ""),
        status=_RUN_STATUS_FILTER.get(status or "", resources_pb2.RUN_STATUS_UNSPECIFIED),
        page_size=page_size(request),
        page_token=request.query.get("pageToken", ""),
        agent=_filter_text(request, "agent"),
        user_id=_filter_text(request, "userId"),
    )
    query_time(request, "since", req.start_time)
    query_time(request, "until", req.end_time)
    resp = await gw.client().list_runs(req, caller.token)
    return _json(
        {"runs": [run_json(r) for r in resp.runs], "nextPageToken": resp.next_page_token or None}
    )


async def resume_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "resume", caller.principal.user_id)
    raw = await read_json(request, gw.settings.max_body_bytes)
    # `fill` and `value` are the fields that are not strings: taken out before the check of the
    # string fields. `value` may be any JSON, null included, so its presence is the key's.
    fill = raw.pop("fill", None) if isinstance(raw, dict) else None
    has_value, value = take(raw, "value")
    data = validate(raw, RESUME_RUN)
    text = _answer_text(data, fill)
    value_json = ""
    if has_value:
        if text or fill is not None:
            raise InvalidArgument("give field 'value' alone, without input, option or fill")
        if data["decision"] != "respond":
            raise InvalidArgument("field 'value' answers only with decision 'respond'")
        value_json = compact_json(value, "value", MAX_GRAPH_JSON)
    req = rs.ResumeRunRequest(
        run_id=request.match_info["id"],
        interrupt_id=data["interruptId"],
        decision=wire.ANSWERS[data["decision"]],
        input=text,
        idempotency_key=data["idempotencyKey"],
        value_json=value_json,
    )
    resp = await gw.client().resume_run(req, caller.token)
    return _json({"run": run_json(resp.run), "replayed": resp.replayed}, 202)


def _answer_text(data: dict[str, str], fill: object) -> str:
    """ResumeRun's `input` from whichever answer field was sent (at most one): a fill becomes
    compact JSON text. Whether it fits the interrupt is the runtime's check (INVALID_ANSWER)."""
    given: list[str] = [name for name in ("input", "option") if name in data]
    if fill is not None:
        given.append("fill")
    if len(given) > 1:
        raise InvalidArgument(f"give at most one of input, option, fill (got {', '.join(given)})")
    if given in (["option"], ["fill"]) and data["decision"] != "respond":
        raise InvalidArgument(f"field {given[0]!r} answers only with decision 'respond'")
    if fill is not None:
        return compact_object(fill, "fill", MAX_ANSWER_CHARS)
    return data.get("option", data.get("input", ""))


async def cancel_run(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "cancel", caller.principal.user_id)
    data = await _body(request, gw, CANCEL_RUN)
    req = rs.CancelRunRequest(run_id=request.match_info["id"], reason=data.get("reason", ""))
    resp = await gw.client().cancel_run(req, caller.token)
    run = run_json(resp.run)
    # 200: the run is cancelled now. 202: a worker holds it (e.g. an approval won the race and
    # the run is running again); the cancel is recorded and ends it at the worker's next step.
    return _json({"run": run}, 200 if run["status"] == "cancelled" else 202)


async def stream_token(request: web.Request) -> web.Response:
    """A short-lived token reading one run's events: for `EventSource`, which sends no headers.
    Signed with the gateways' own key (stream_tokens.py), never outliving the caller's token."""
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.limiter.check(gw.redis, "stream_token", caller.principal.user_id)
    run_id = request.match_info["id"]
    # Only a caller who may read the run gets a token for it (404/403 come from the runtime).
    await gw.client().get_run(rs.GetRunRequest(run_id=run_id), caller.token)
    token, exp = gw.auth.stream_tokens.mint(
        caller.principal.user_id, run_id, not_after=caller.expires_at, session_jti=caller.jti
    )
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exp))
    return _json(
        {"token": token, "expiresAt": expires, "eventsUrl": f"/v1/runs/{run_id}/events"}, 201
    )


async def run_events(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    opened = await _open_events(request, gw)
    if opened is None:
        return web.Response(status=204)
    slot = await gw.slots.acquire(gw.redis, opened.user_id)  # 429 past the cap, on any pod
    # Only what the stream needs stays referenced while it is open (thousands may idle).
    return await stream_response(
        request,
        gw,
        run_id=opened.run_id,
        token=opened.token,
        after=opened.after,
        started=started,
        head=opened.head,
        ended=opened.ended,
        slot=slot,
        expires_at=opened.expires_at,
        jtis=opened.jtis,
    )


@dataclass(frozen=True)
class EventsOpen:
    """What an SSE open resolved to: where to follow the run from, what to send first."""

    run_id: str
    token: Credential
    user_id: str
    after: int
    expires_at: float  # the opening token's: the stream ends then (stream_grants.py)
    jtis: tuple[str, ...]  # and when one of these is revoked
    head: bytes = b""  # a `reset` for a resume point ahead of the run, or past retention
    ended: bool = False  # the run is over: nothing follows the head


async def _open_events(request: web.Request, gw: GatewayState) -> EventsOpen | None:
    """Auth, rate limit, resume point and the caller's own GetRun (the ownership check) for an
    SSE open; None when the run is over with nothing left to send (204)."""
    caller = await authenticate(request, gw.auth, cookie=True, stream_token=True)
    run_id = request.match_info["id"]
    p = caller.principal
    await gw.limiter.check(gw.redis, "events", p.user_id)
    if p.scope == "stream" and p.run_id != run_id:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")  # never confirm it exists
    after = input_parsers.resume_point(
        request.headers.get("Last-Event-ID"), request.query.get("after")
    )
    # A stream token's reader is checked as its user, by the gateway's service identity.
    resp = await gw.client().get_run(rs.GetRunRequest(run_id=run_id), caller.credential)
    run = resp.run
    if is_finished(run, after):
        return None
    opened = EventsOpen(run_id, caller.credential, p.user_id, after, caller.expires_at, caller.jtis)
    if after > run.last_sequence or run.events_expired:
        # Ahead of the run (a stale or forged Last-Event-ID), or behind it on a finished run whose
        # events retention removed: the client redraws from the run's state in this GetRun's
        # answer, then follows the shared feed from the real position (nothing, if it is over).
        # No upstream of its own: any number of such resumes cost one feed, as any other.
        reset = events_pb2.RunEvent(run_id=run_id, reset=events_pb2.Reset(run=run))
        ended = run.status in TERMINAL_STATUSES
        return replace(opened, after=run.last_sequence, head=sse_frame(reset), ended=ended)
    return opened


async def open_session(request: web.Request) -> web.Response:
    """The browser's login: trade a bearer token (header only) for an HttpOnly, SameSite=Strict
    session cookie, and get the CSRF token its state-changing requests must send (csrf.py). The
    page keeps the CSRF token in memory only and forgets the bearer."""
    gw = state(request)
    csrf.check_origin(request, required=False)  # a browser's login from another site: refused
    caller = await authenticate(request, gw.auth)
    remaining = max(1, int(caller.expires_at - time.time()))
    resp = _json(_session_json(caller, remaining))
    resp.set_cookie(
        SESSION_COOKIE,
        caller.token,
        max_age=remaining,
        path="/v1",
        httponly=True,
        samesite="Strict",
        secure=gw.settings.env == "production",
    )
    return resp


async def get_session(request: web.Request) -> web.Response:
    """Who the session cookie names, and its CSRF token: what a reloaded page needs."""
    gw = state(request)
    caller = await _caller(request, gw)
    return _json(_session_json(caller, max(1, int(caller.expires_at - time.time()))))


def _session_json(caller: Caller, remaining_s: int) -> dict[str, Any]:
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + remaining_s))
    return {
        "user": caller.principal.user_id,
        "csrfToken": csrf.csrf_token(caller.token),
        "expiresAt": expires,
    }


async def close_session(request: web.Request) -> web.Response:
    """Sign out: the session's token is revoked on every gateway pod (its open streams end), not
    merely forgotten by this browser. Needs the session itself (bearer, or the cookie with the
    CSRF checks of any state-changing request: another site cannot sign the user out)."""
    gw = state(request)
    caller = await _caller(request, gw)
    await gw.auth.revocations.revoke(gw.revocations_redis, caller.jti, caller.expires_at)
    resp = web.Response(status=204)
    resp.del_cookie(SESSION_COOKIE, path="/v1")
    return resp


async def dev_token(request: web.Request) -> web.Response:
    """Dev only (the route exists only with TETHER_DEV_LOGIN=1, which `tether dev` sets and
    production refuses): a user token for the demo login."""
    gw = state(request)
    data = await _body(request, gw, DEV_TOKEN)
    user = data["user"].strip()
    token = issue_token(gw.settings.jwt_secret, user, ttl_s=DEV_TOKEN_TTL_S)
    return _json({"token": token, "user": user}, 201)


def add_routes(app: web.Application, *, dev: bool) -> None:
    app.router.add_get("/v1/agents", list_agents)
    app.router.add_post("/v1/conversations", create_conversation)
    app.router.add_get("/v1/conversations", list_conversations)
    app.router.add_get("/v1/conversations/{id}", get_conversation)
    app.router.add_delete("/v1/conversations/{id}", delete_conversation)
    app.router.add_get("/v1/conversations/{id}/messages", list_messages)
    app.router.add_post("/v1/conversations/{id}/runs", start_run)
    app.router.add_get("/v1/runs", list_runs)
    app.router.add_get("/v1/runs/{id}", get_run)
    app.router.add_get("/v1/runs/{id}/events", run_events)
    app.router.add_post("/v1/runs/{id}/resume", resume_run)
    app.router.add_post("/v1/runs/{id}/cancel", cancel_run)
    app.router.add_post("/v1/runs/{id}/stream-token", stream_token)
    app.router.add_post("/v1/session", open_session)
    app.router.add_get("/v1/session", get_session)
    app.router.add_delete("/v1/session", close_session)
    if dev:
        app.router.add_post("/v1/dev/token", dev_token)
