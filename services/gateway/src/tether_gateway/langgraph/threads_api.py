"""LangGraph's threads: Tether's conversations. A thread's status comes from its newest Tether
run (busy while it is queued, waiting or running; interrupted while it waits on a person), its
state from that run's log (thread_state.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import InvalidArgument

from tether_gateway.auth import authenticate
from tether_gateway.langgraph import lookup
from tether_gateway.langgraph.run_request import count_field
from tether_gateway.langgraph.thread_state import thread_values
from tether_gateway.langgraph.views import state_json, thread_json, thread_status
from tether_gateway.state import state
from tether_gateway.validation import read_json

_STATUSES = ("idle", "busy", "interrupted", "error")
_SEARCH_PAGE = 50


async def _object(request: web.Request) -> dict[str, Any]:
    raw = await read_json(request, state(request).settings.max_body_bytes)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidArgument("the request body must be a JSON object")
    return raw


async def create(request: web.Request) -> web.Response:
    """A new conversation. Tether picks its ids: a `thread_id` of the client's is accepted only
    for a thread that exists with `if_exists: "do_nothing"` (422 otherwise)."""
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    await gw.limiter.check(gw.redis, "conversation", caller.principal.user_id)
    body = await _object(request)
    client = gw.client()
    if body.get("thread_id"):
        if body.get("if_exists") != "do_nothing":
            raise InvalidArgument("Tether picks thread ids: leave thread_id out")
        req = rs.GetConversationRequest(conversation_id=str(body["thread_id"]))
        conv = (await client.get_conversation(req, caller.credential)).conversation
    else:
        metadata = body.get("metadata") or {}
        title = metadata.get("title", "") if isinstance(metadata, dict) else ""
        if not isinstance(title, str) or len(title) > 200:
            raise InvalidArgument("metadata.title must be a text of at most 200 characters")
        req_new = rs.CreateConversationRequest(title=title)
        conv = (await client.create_conversation(req_new, caller.credential)).conversation
        return web.json_response(thread_json(conv, None))  # new: no run yet
    latest = await lookup.latest_run(client, caller.credential, conv.id)
    return web.json_response(thread_json(conv, latest))


async def get(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    thread_id = request.match_info["thread_id"]
    client = gw.client()
    req = rs.GetConversationRequest(conversation_id=thread_id)
    conv = (await client.get_conversation(req, caller.credential)).conversation
    latest = await lookup.latest_run(client, caller.credential, thread_id)
    tv = await thread_values(client, caller.credential, thread_id, latest)
    return web.json_response(thread_json(conv, latest, tv.values, tv.interrupts))


async def delete(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    req = rs.DeleteConversationRequest(conversation_id=request.match_info["thread_id"])
    await gw.client().delete_conversation(req, caller.credential)
    return web.Response(status=204)


async def search(request: web.Request) -> web.Response:
    """The caller's threads, newest first; `status` filters, `limit` / `offset` page."""
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    body = await _object(request)
    limit = count_field(body, "limit", 10, 200)
    offset = count_field(body, "offset", 0, 10_000)
    status = body.get("status")
    if status is not None and status not in _STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(_STATUSES)}")
    client = gw.client()
    out: list[dict[str, Any]] = []
    seen = 0
    page = ""
    while len(out) < limit:
        req = rs.ListConversationsRequest(page_size=_SEARCH_PAGE, page_token=page)
        resp = await client.list_conversations(req, caller.credential)
        # Each thread's newest run, asked for the whole page at once (one round trip, not one
        # per thread in turn).
        newest = await asyncio.gather(
            *(lookup.latest_run(client, caller.credential, c.id) for c in resp.conversations)
        )
        for conv, latest in zip(resp.conversations, newest, strict=True):
            if status and thread_status(latest) != status:
                continue
            seen += 1
            if seen > offset and len(out) < limit:
                out.append(thread_json(conv, latest))
        page = resp.next_page_token
        if not page:
            break
    return web.json_response(out)


async def get_state(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    thread_id = request.match_info["thread_id"]
    client = gw.client()
    latest = await lookup.latest_run(client, caller.credential, thread_id)
    tv = await thread_values(client, caller.credential, thread_id, latest)
    return web.json_response(state_json(thread_id, tv, latest))


async def history(request: web.Request) -> web.Response:
    """The thread's states, newest first: Tether keeps the current one only."""
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    thread_id = request.match_info["thread_id"]
    client = gw.client()
    latest = await lookup.latest_run(client, caller.credential, thread_id)
    tv = await thread_values(client, caller.credential, thread_id, latest)
    return web.json_response([state_json(thread_id, tv, latest)])


def add_routes(app: web.Application) -> None:
    app.router.add_post("/threads", create)
    app.router.add_post("/threads/search", search)
    app.router.add_get("/threads/{thread_id}", get)
    app.router.add_delete("/threads/{thread_id}", delete)
    app.router.add_get("/threads/{thread_id}/state", get_state)
    app.router.add_post("/threads/{thread_id}/history", history)
    app.router.add_get("/threads/{thread_id}/history", history)
