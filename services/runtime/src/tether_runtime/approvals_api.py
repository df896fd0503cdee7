"""ListPendingApprovals: the approvals inbox, for the caller (a person, or a service acting on a
person's behalf); what it lists is decided in `approvals.py`."""

from __future__ import annotations

from tether.runtime.v1 import approvals_pb2
from tether_common.auth import Principal
from tether_common.errors import PermissionDenied

from tether_runtime import approvals, convert
from tether_runtime.store.db import Pool


async def list_pending(pool: Pool, principal: Principal) -> list[approvals.PendingApproval]:
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    async with pool.acquire() as conn:
        return await approvals.list_pending(conn, principal.user_id)


def pending_pb(p: approvals.PendingApproval) -> approvals_pb2.PendingApproval:
    return approvals_pb2.PendingApproval(
        interrupt=convert.interrupt_pb(p.interrupt),
        requester=p.requester,
        agent=p.agent,
        approval_grant=p.approval_grant,
        approvals_required=p.approvals_required,
        approved_by=list(p.approved_by),
        self_approval=p.self_approval,
        steps=[approvals_pb2.ApprovalStep(tool=s.tool, status=s.status) for s in p.steps],
    )
