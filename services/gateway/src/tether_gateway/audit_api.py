"""`GET /v1/audit`: the audit log for admins (the runtime checks the grant `audit.read` on `*`
and answers PERMISSION_DENIED, 403, to anyone else). Filters: `since` / `until` (RFC 3339),
`actor`; pages as every list of this API (`pageSize`, `pageToken`)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from tether.runtime.v1 import audit_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import InvalidArgument
from tether_common.event_json import timestamp_json
from tether_common.input_parsers import rfc3339

from tether_gateway.auth import authenticate
from tether_gateway.state import state
from tether_gateway.validation import page_size

MAX_PAGE = 1000


def query_time(request: web.Request, name: str, into: Any) -> None:
    """A time filter of the query (RFC 3339) into the request's Timestamp field `into`."""
    raw = request.query.get(name)
    if raw is not None:
        into.FromDatetime(rfc3339(raw, name))


def record_json(r: audit_pb2.AuditRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "time": timestamp_json(r.create_time),
        "actor": r.actor,
        "action": r.action,
        "runId": r.run_id,
        "interruptId": r.interrupt_id,
        "callId": r.call_id,
        "tool": r.tool,
        "permission": r.permission,
        "scope": r.scope,
        "decision": r.decision,
        "outcome": r.outcome,
        "approver": r.approver,
        "idempotencyKey": r.idempotency_key,
        "clientAddress": r.client_address,
        "pod": r.pod,
        "traceId": r.trace_id,
        "details": json.loads(r.details_json or "{}"),
    }


async def list_audit(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth, cookie=True)
    actor = request.query.get("actor", "")
    if len(actor) > 200:
        raise InvalidArgument("actor is longer than 200 characters")
    req = rs.ListAuditRecordsRequest(
        actor=actor,
        page_size=page_size(request, default=100, maximum=MAX_PAGE),
        page_token=request.query.get("pageToken", ""),
    )
    query_time(request, "since", req.start_time)
    query_time(request, "until", req.end_time)
    resp = await gw.client().list_audit_records(req, caller.token)
    return web.json_response(
        {
            "auditRecords": [record_json(r) for r in resp.audit_records],
            "nextPageToken": resp.next_page_token or None,
        }
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/audit", list_audit)
