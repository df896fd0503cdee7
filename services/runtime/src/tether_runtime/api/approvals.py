"""ListPendingApprovals: the approvals inbox, for the caller (a person, or a service acting on a
person's behalf); what it lists is decided in `approvals.py`. Pages as ListRuns' (AIP-158): the
token (run_listing's) carries the last card's id and is bound to the caller, so it continues
only that caller's inbox."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from tether.runtime.v1 import approvals_pb2
from tether_common.auth import Principal
from tether_common.errors import InvalidArgument, PermissionDenied

from tether_runtime.api import convert, run_listing
from tether_runtime.policy import approvals
from tether_runtime.store.db import Pool

# A caller that asks for no page size gets what the inbox answered before it had pages: up to 200.
DEFAULT_PAGE = 200
MAX_PAGE = 200


@dataclass(frozen=True)
class InboxFilter:
    """What an inbox page token is bound to: whose inbox (never a ListRuns token's filters)."""

    user_id: str

    def fingerprint(self) -> str:
        raw = json.dumps(["approvals", self.user_id])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


async def list_pending(
    pool: Pool, principal: Principal, page_size: int = 0, page_token: str = ""
) -> tuple[list[approvals.PendingApproval], str]:
    """A page of the caller's inbox and the next page's token ("" on the last page)."""
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    if page_size < 0:
        raise InvalidArgument("page_size must not be negative")
    size = min(page_size or DEFAULT_PAGE, MAX_PAGE)
    bound = InboxFilter(principal.user_id)
    after = run_listing.decode_token(page_token, bound) or ""
    async with pool.acquire() as conn:
        found = await approvals.list_pending(conn, principal.user_id, size + 1, after)
    more = len(found) > size
    found = found[:size]
    return found, run_listing.encode_token(found[-1].interrupt.id, bound) if more else ""


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
