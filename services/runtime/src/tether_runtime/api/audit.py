"""ListAuditRecords: admins only (the grant `audit.read` on `*`, read at every call), filters by
time and actor, AIP-158 pages whose token carries the position and is bound to the filters."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from tether.runtime.v1 import audit_pb2
from tether_common.auth import Principal
from tether_common.errors import InvalidArgument, PermissionDenied
from tether_common.input_parsers import encode_page_token, page_limit, page_token, rfc3339

from tether_runtime import policy
from tether_runtime.store import audit
from tether_runtime.store.audit import AuditRecord
from tether_runtime.store.db import Pool

ADMIN_ACTION = "audit.read"
ADMIN_SCOPE = "*"
MAX_PAGE = 1000
DEFAULT_PAGE = 100


async def require_admin(pool: Pool, principal: Principal) -> None:
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    async with pool.acquire() as conn:
        allowed = await policy.granted(conn, principal.user_id, ADMIN_ACTION, ADMIN_SCOPE)
    if not allowed:
        raise PermissionDenied(f"reading the audit log takes the grant {ADMIN_ACTION} on *")


def _filters_hash(since: datetime | None, until: datetime | None, actor: str) -> str:
    raw = json.dumps(
        [since.isoformat() if since else "", until.isoformat() if until else "", actor]
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def encode_token(last: AuditRecord, filters: str) -> str:
    return encode_page_token({"t": last.at.isoformat(), "id": last.id}, filters)


def decode_token(token: str, filters: str) -> tuple[datetime, str] | None:
    """The (time, id) a page continues after; None for the first page."""
    position = page_token(token, filters, ("t", "id"))
    if position is None:
        return None
    return rfc3339(position["t"], "page_token"), position["id"]


async def list_records(
    pool: Pool,
    principal: Principal,
    since: datetime | None,
    until: datetime | None,
    actor: str,
    page_size: int,
    page_token: str,
) -> tuple[list[AuditRecord], str]:
    await require_admin(pool, principal)
    size = page_limit(page_size, default=DEFAULT_PAGE, maximum=MAX_PAGE)
    if len(actor) > 200:
        raise InvalidArgument("actor is longer than 200 characters")
    if since is not None and until is not None and until < since:
        raise InvalidArgument("end_time is before start_time")
    filters = _filters_hash(since, until, actor)
    after = decode_token(page_token, filters)
    async with pool.acquire() as conn:
        rows = await audit.list(
            conn, since=since, until=until, actor=actor, after=after, limit=size + 1
        )
    more = len(rows) > size
    rows = rows[:size]
    return rows, encode_token(rows[-1], filters) if more else ""


def record_pb(r: AuditRecord) -> audit_pb2.AuditRecord:
    out = audit_pb2.AuditRecord(
        id=r.id,
        actor=r.actor,
        action=r.action,
        run_id=r.run_id,
        interrupt_id=r.interrupt_id,
        call_id=r.call_id,
        tool=r.tool,
        permission=r.permission,
        scope=r.scope,
        decision=r.decision,
        outcome=r.outcome,
        approver=r.approver,
        idempotency_key=r.idempotency_key,
        client_address=r.client_address,
        pod=r.pod,
        trace_id=r.trace_id,
        details_json=json.dumps(r.details, sort_keys=True),
    )
    out.create_time.FromDatetime(r.at)
    return out
