"""The approvals inbox: `GET /v1/approvals` (the cards the caller may decide now, from the
runtime's ListPendingApprovals) and `GET /v1/approvals/events`, its live SSE stream.

`GET /v1/approvals` pages as every list of this API (`pageSize`, 1-200, 200 by default, and
`pageToken`); the runtime filters who may decide before it cuts a page, so a page holds only
cards the caller may decide.

The stream is one per user and carries **snapshots**: each `approvals` event is the caller's
inbox (its first page: the 200 oldest cards) as the runtime reads it from Postgres, sent first
on connect and then whenever it changes (a card appears, is approved by someone, is decided, expires). Nothing can be lost
across a reconnect or a gateway restart: the first frame of every connection is the complete
current state, so no per-user sequence or replay log is needed, and the client simply redraws.
Changes are found by asking the runtime every `POLL_S` seconds (one indexed query per open
inbox); the event's `id` is a hash of the snapshot, so a reconnect that finds the same inbox
still gets it once (a client cannot tell a snapshot it has from one it missed otherwise)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from aiohttp import web
from tether.runtime.v1 import approvals_pb2
from tether_common.event_json import interrupt_json

from tether_gateway.auth import Caller, authenticate
from tether_gateway.sse import EventStream, stream_response
from tether_gateway.state import GatewayState, state
from tether_gateway.validation import page_size

POLL_S = 1.0
PAGE_MAX = 200  # the runtime's largest page, and what a caller that names none gets


def approval_json(p: approvals_pb2.PendingApproval) -> dict[str, Any]:
    return {
        "interrupt": interrupt_json(p.interrupt),
        "runId": p.interrupt.run_id,
        "requester": p.requester,
        "agent": p.agent,
        "approvalGrant": p.approval_grant,
        "approvalsRequired": p.approvals_required,
        "approvedBy": list(p.approved_by),
        "selfApproval": p.self_approval,
        "steps": [{"tool": s.tool, "status": s.status} for s in p.steps],
    }


async def _inbox(
    gw: GatewayState, caller: Caller, page_size: int = 0, page_token: str = ""
) -> tuple[list[dict[str, Any]], str]:
    resp = await gw.client().list_pending_approvals(caller.credential, page_size, page_token)
    return [approval_json(p) for p in resp.pending_approvals], resp.next_page_token


async def list_approvals(request: web.Request) -> web.Response:
    """A page of the inbox: `?pageSize=` (1-200, 200 by default) and `?pageToken=` as every
    list of this API."""
    gw = state(request)
    caller = await authenticate(request, gw.auth, cookie=True)
    approvals, token = await _inbox(
        gw,
        caller,
        page_size(request, default=PAGE_MAX, maximum=PAGE_MAX),
        request.query.get("pageToken", ""),
    )
    return web.json_response({"approvals": approvals, "nextPageToken": token or None})


def _frame(approvals: list[dict[str, Any]]) -> tuple[str, bytes]:
    data = json.dumps({"type": "approvals", "approvals": approvals}, separators=(",", ":"))
    tag = hashlib.sha256(data.encode()).hexdigest()[:16]
    return tag, f"id: {tag}\nevent: approvals\ndata: {data}\n\n".encode()


async def approval_events(request: web.Request) -> web.StreamResponse:
    """The inbox's snapshots over the gateway's one SSE writer (sse.stream_response): its
    heartbeats, slow-client drop, token expiry and revocation, drain, and the stream slot's
    release when the client leaves; this module only polls the inbox (`_poll`)."""
    gw = state(request)
    caller = await authenticate(request, gw.auth, cookie=True)
    first, _ = await _inbox(gw, caller)  # before the 200: a refused caller gets the error status
    await gw.limiter.check(gw.redis, "events", caller.principal.user_id)
    # An inbox stream counts against the user's open streams like a run's (429 past the cap).
    slot = await gw.slots.acquire(gw.redis, caller.principal.user_id)
    started = time.perf_counter()
    last_tag = request.headers.get("Last-Event-ID", "")

    async def poll(stream: EventStream) -> None:
        await _poll(stream, gw, caller, first, last_tag)

    return await stream_response(
        request,
        gw,
        run_id="",
        token=caller.credential,
        after=0,
        started=started,
        slot=slot,
        expires_at=caller.expires_at,
        jtis=caller.jtis,
        source=poll,
    )


async def _poll(
    stream: EventStream,
    gw: GatewayState,
    caller: Caller,
    first: list[dict[str, Any]],
    last_tag: str,
) -> None:
    """Offer the first snapshot (unless the client has it: its Last-Event-ID), then each changed
    one, until the client leaves (checked before every poll: a closed stream stops asking the
    runtime within POLL_S) or the runtime fails (the client reconnects, to any pod, and gets
    the whole inbox again)."""
    tag, frame = _frame(first)
    if tag != last_tag and not stream.offer(frame, 1):
        return
    last_tag = tag
    while True:
        await asyncio.sleep(POLL_S)
        if stream.client_gone():
            return
        tag, frame = _frame((await _inbox(gw, caller))[0])
        if tag != last_tag:
            if not stream.offer(frame, 1):
                return
            last_tag = tag


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/approvals", list_approvals)
    app.router.add_get("/v1/approvals/events", approval_events)
