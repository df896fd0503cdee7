"""The audit log: every decision on an interrupt and every step of a write tool's execution,
written in the same transaction as what it records, and only ever inserted (no function here
updates or deletes, and the table's triggers refuse it: migration 0010).

Who is asking (address, pod, trace) travels as an `AuditContext`."""

from __future__ import annotations

import builtins
import json
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opentelemetry import trace
from tether_common.ids import new_id

from tether_runtime.domain.records import InterruptRow
from tether_runtime.store.db import Conn

POD = os.environ.get("HOSTNAME") or socket.gethostname()
SYSTEM = "system"

# Every action an audit record can carry: the reference (docs/DESIGN.md "Audit", openapi.json's
# AuditRecord.action) is checked against this list by tests/docs/test_reference_lists.py, and
# writing any other action is a bug that fails at the write.
ACTIONS = (
    "interrupt.approved",
    "interrupt.rejected",
    "interrupt.responded",
    "interrupt.retry",
    "interrupt.mark_done",
    "interrupt.abandon",
    "interrupt.denied",
    "interrupt.approval_recorded",
    "interrupt.expired",
    "interrupt.cancelled",
    "tool.claimed",
    "tool.executed",
    "tool.skipped",
    "tool.outcome_unknown",
)
_ACTIONS = frozenset(ACTIONS)


def _known(action: str) -> str:
    if action not in _ACTIONS:
        raise ValueError(f"unknown audit action {action!r}: add it to store.audit.ACTIONS")
    return action


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


@dataclass(frozen=True)
class AuditContext:
    """Where a request came from: the address the gateway saw (x-forwarded-for) or the gRPC
    peer, and the trace it belongs to."""

    client_address: str = ""
    trace_id: str = ""
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditRecord:
    id: str
    at: datetime
    actor: str
    action: str
    run_id: str
    interrupt_id: str
    call_id: str
    tool: str
    permission: str
    scope: str
    decision: str
    outcome: str
    approver: str
    idempotency_key: str
    client_address: str
    pod: str
    trace_id: str
    details: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The record as `GET /v1/audit` and `tether audit export` show it."""
        return {
            "id": self.id,
            "time": self.at.isoformat().replace("+00:00", "Z"),
            "actor": self.actor,
            "action": self.action,
            "runId": self.run_id,
            "interruptId": self.interrupt_id,
            "callId": self.call_id,
            "tool": self.tool,
            "permission": self.permission,
            "scope": self.scope,
            "decision": self.decision,
            "outcome": self.outcome,
            "approver": self.approver,
            "idempotencyKey": self.idempotency_key,
            "clientAddress": self.client_address,
            "pod": self.pod,
            "traceId": self.trace_id,
            "details": self.details,
        }


async def record_decision(
    conn: Conn,
    intr: InterruptRow,
    *,
    actor: str,
    decision: str,
    outcome: str,
    idempotency_key: str = "",
    ctx: AuditContext | None = None,
) -> None:
    """A person's (or the clock's) decision on an interrupt, in the deciding transaction.
    `outcome`: what the decision did (resolved, denied, expired, cancelled)."""
    ctx = ctx or AuditContext()
    await conn.execute(
        "INSERT INTO audit_record (id, actor, action, run_id, interrupt_id, call_id, tool, "
        "permission, scope, decision, outcome, idempotency_key, client_address, pod, trace_id, "
        "details) "
        "SELECT $1, $2, $3, $4, $5, $6, COALESCE(tc.tool, ''), $7, $8, $9, $10, $11, $12, $13, "
        "$14, $15 "
        "FROM (SELECT 1) one LEFT JOIN tool_call tc ON tc.run_id = $4 AND tc.call_id = $6",
        new_id("aud"),
        actor,
        _known(f"interrupt.{decision if outcome == 'resolved' else outcome}"),
        intr.run_id,
        intr.id,
        intr.call_id,
        intr.action,
        intr.scope,
        decision,
        outcome,
        idempotency_key,
        ctx.client_address[:300],
        POD,
        ctx.trace_id or current_trace_id(),
        {"kind": intr.kind, **ctx.details},
    )


_TOOL_RECORD = """
INSERT INTO audit_record (id, actor, action, run_id, interrupt_id, call_id, tool, permission,
                          scope, decision, outcome, approver, idempotency_key, pod, trace_id,
                          details)
SELECT $1, r.user_id, $2, tc.run_id, COALESCE(i.id, ''), tc.call_id, tc.tool, $5,
       COALESCE(NULLIF($6, ''), i.scope, ''), COALESCE(i.decision, ''), $7,
       COALESCE(tc.approved_by, i.resolved_by, ''), tc.idempotency_key, $8, $9, $10
FROM tool_call tc
JOIN run r ON r.id = tc.run_id
LEFT JOIN LATERAL (
    SELECT id, scope, decision, resolved_by FROM interrupt
    WHERE run_id = tc.run_id AND call_id = tc.call_id AND status = 'resolved'
    ORDER BY resolved_at DESC LIMIT 1
) i ON true
WHERE tc.run_id = $3 AND tc.call_id = $4
"""


async def record_tool(
    conn: Conn,
    run_id: str,
    call_id: str,
    action: str,
    outcome: str,
    *,
    permission: str = "",
    scope: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """A step of a write tool's execution (`tool.claimed`, `tool.executed`, ...), in the same
    transaction as the tool call's move; the requester, approver and key come from the call."""
    await conn.execute(
        _TOOL_RECORD,
        new_id("aud"),
        _known(action),
        run_id,
        call_id,
        permission,
        scope,
        outcome,
        POD,
        current_trace_id(),
        details or {},
    )


async def list(
    conn: Conn,
    *,
    since: datetime | None,
    until: datetime | None,
    actor: str,
    after: tuple[datetime, str] | None,
    limit: int,
) -> builtins.list[AuditRecord]:
    """Oldest first: records in [since, until), where `actor` acted or approved (any when
    empty), after the (time, id) position `after`."""
    rows = await conn.fetch(
        "SELECT * FROM audit_record "
        "WHERE ($1::timestamptz IS NULL OR at >= $1) AND ($2::timestamptz IS NULL OR at < $2) "
        "AND ($3 = '' OR actor = $3 OR approver = $3) "
        "AND ($4::timestamptz IS NULL OR (at, id) > ($4, $5)) "
        "ORDER BY at, id LIMIT $6",
        since,
        until,
        actor,
        after[0] if after else None,
        after[1] if after else "",
        limit,
    )
    return [_record(r) for r in rows]


def _record(r: Any) -> AuditRecord:
    details = r["details"]
    return AuditRecord(
        id=r["id"],
        at=r["at"],
        actor=r["actor"],
        action=r["action"],
        run_id=r["run_id"],
        interrupt_id=r["interrupt_id"],
        call_id=r["call_id"],
        tool=r["tool"],
        permission=r["permission"],
        scope=r["scope"],
        decision=r["decision"],
        outcome=r["outcome"],
        approver=r["approver"],
        idempotency_key=r["idempotency_key"],
        client_address=r["client_address"],
        pod=r["pod"],
        trace_id=r["trace_id"],
        details=details if isinstance(details, dict) else json.loads(details),
    )
