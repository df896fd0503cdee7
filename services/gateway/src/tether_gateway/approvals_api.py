"""The approvals inbox: `GET /v1/approvals` (the cards the caller may decide now, from the
runtime's ListPendingApprovals) and `GET /v1/approvals/events`, its live SSE stream.

The stream is one per user and carries **snapshots**: each `approvals` event is the caller's
whole inbox as the runtime reads it from Postgres, sent first on connect and then whenever it
changes (a card appears, is approved by someone, is decided, expires). Nothing can be lost
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

import grpc
from aiohttp import web
from tether.runtime.v1 import approvals_pb2
from tether_common.event_json import interrupt_json

from tether_gateway.auth import Caller, authenticate
from tether_gateway.sse import SSE_HEADERS
from tether_gateway.state import GatewayState, state
from tether_gateway.stream_grants import reauthenticate_frame

POLL_S = 1.0


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


async def _inbox(gw: GatewayState, caller: Caller) -> list[dict[str, Any]]:
    resp = await gw.client().list_pending_approvals(caller.credential)
    return [approval_json(p) for p in resp.pending_approvals]


async def list_approvals(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth, cookie=True)
    return web.json_response({"approvals": await _inbox(gw, caller)})


def _frame(approvals: list[dict[str, Any]]) -> tuple[str, bytes]:
    data = json.dumps({"type": "approvals", "approvals": approvals}, separators=(",", ":"))
    tag = hashlib.sha256(data.encode()).hexdigest()[:16]
    return tag, f"id: {tag}\nevent: approvals\ndata: {data}\n\n".encode()


async def approval_events(request: web.Request) -> web.StreamResponse:
    gw = state(request)
    caller = await authenticate(request, gw.auth, cookie=True)
    first = await _inbox(gw, caller)  # before the 200: a refused caller gets the error status
    await gw.limiter.check(gw.redis, "events", caller.principal.user_id)
    # An inbox stream counts against the user's open streams like a run's (429 past the cap).
    slot = await gw.slots.acquire(gw.redis, caller.principal.user_id)
    try:
        return await _follow(request, gw, caller, first)
    finally:
        await gw.slots.release(gw.redis, slot)


async def _follow(
    request: web.Request, gw: GatewayState, caller: Caller, first: list[dict[str, Any]]
) -> web.StreamResponse:
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    await resp.write(f"retry: {gw.settings.sse_retry_ms}\n\n".encode())
    last_tag = request.headers.get("Last-Event-ID", "")
    tag, frame = _frame(first)
    if tag != last_tag:
        await resp.write(frame)
    last_tag, quiet_since = tag, time.monotonic()
    while not gw.draining:
        await asyncio.sleep(POLL_S)
        if time.time() >= caller.expires_at:
            await resp.write(reauthenticate_frame("expired"))
            break
        if any(gw.auth.revocations.is_revoked(j) for j in caller.jtis):
            await resp.write(reauthenticate_frame("revoked"))
            break
        try:
            tag, frame = _frame(await _inbox(gw, caller))
        except grpc.aio.AioRpcError:
            break  # the client reconnects (to any pod) and gets the whole inbox again
        if tag != last_tag:
            await resp.write(frame)
            last_tag, quiet_since = tag, time.monotonic()
        elif time.monotonic() - quiet_since >= gw.settings.sse_heartbeat_s:
            await resp.write(b": keep-alive\n\n")
            quiet_since = time.monotonic()
    return resp


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/approvals", list_approvals)
    app.router.add_get("/v1/approvals/events", approval_events)
