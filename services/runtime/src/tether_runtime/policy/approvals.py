"""Approval policies at decision time, and the approvals inbox.

A `confirm_action` card carries the policy its tool declared (`tether_sdk.Approval`, stored on
the interrupt by migration 0011). Without one (`approval_grant` NULL), today's rule: the run's
owner decides, approving with the tool's own grant. With one:

- who may decide: anyone holding `approval_grant` on the card's scope, read at every decision
  (never cached: a revoked grant stops an approver at once); the requester too, with the
  tool's own grant (today's confirmation), unless `self_approval` is false (then the requester
  may still reject or cancel, never approve);
- an approver who is not the run's owner may decide the card and nothing else: the run stays
  invisible to them (GetRun, streams, cancel answer RUN_NOT_FOUND as before);
- `approvals_required = 2`: each approval is a row of `interrupt_approval` (unique per
  approver), written under the run's lock, so approvals arriving together on two pods
  serialize; the approval that completes the count claims the interrupt (the one conditional
  claim of invariant 4) and only then the tool runs. Any approver's rejection rejects.

Every other kind of interrupt (a question, an outcome in doubt) stays the owner's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether_common.errors import AlreadyResolved, PermissionDenied

from tether_runtime import policy
from tether_runtime.domain.records import InterruptRow, RunRow
from tether_runtime.domain.views import InterruptView
from tether_runtime.store import approval_inbox, interrupts
from tether_runtime.store.db import Conn


def governed(intr: InterruptRow) -> bool:
    """Whether a policy (rather than run ownership) says who decides this card."""
    return intr.kind == "confirm_action" and bool(intr.approval_grant)


async def is_approver(conn: Conn, user_id: str, intr: InterruptRow) -> bool:
    """Holds the card's approval grant on its scope now."""
    assert intr.approval_grant
    return await policy.granted(conn, user_id, intr.approval_grant, intr.scope)


async def may_see(conn: Conn, user_id: str, run: RunRow, intr: InterruptRow | None) -> bool:
    """Whether the caller may learn anything of this decision: the run's owner, or an approver
    of a governed card. Anyone else is told the run does not exist."""
    if run.user_id == user_id:
        return True
    return intr is not None and governed(intr) and await is_approver(conn, user_id, intr)


async def refusal(
    conn: Conn, user_id: str, run: RunRow, intr: InterruptRow, acts: bool
) -> PermissionDenied | None:
    """Step 4 of invariant 5 for this caller: None if they may give this answer now."""
    if not governed(intr):
        # Today's rule: the owner (the only one who sees it), with the tool's grant to act.
        if (
            acts
            and intr.action
            and not await policy.granted(conn, user_id, intr.action, intr.scope)
        ):
            return PermissionDenied(f"you may not {intr.action} on {intr.scope}")
        return None
    own = run.user_id == user_id
    if own and not acts:
        return None  # the requester may always withdraw their own request
    if own and not intr.self_approval:
        return PermissionDenied(
            "this action needs another person's approval: you may not approve your own request",
            reason="SELF_APPROVAL_FORBIDDEN",
        )
    if own:
        # Self-approval, where allowed, is today's confirmation: with the tool's own grant.
        if not await policy.granted(conn, user_id, intr.action, intr.scope):
            return PermissionDenied(f"you may not {intr.action} on {intr.scope}")
        return None
    if not await is_approver(conn, user_id, intr):
        return PermissionDenied(f"you may not {intr.approval_grant} on {intr.scope}")
    return None


async def add_approval(conn: Conn, intr: InterruptRow, user_id: str, key: str) -> int:
    """Record this approver's approval (under the run's lock) and return how many distinct
    people have approved. The same person approving again (another key) is refused."""
    inserted = await conn.fetchval(
        "INSERT INTO interrupt_approval (interrupt_id, approver, idempotency_key) "
        "VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1",
        intr.id,
        user_id,
        key,
    )
    if inserted is None:
        raise AlreadyResolved(
            "you already approved this request; it waits for another approver",
            reason="APPROVAL_ALREADY_GIVEN",
        )
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM interrupt_approval WHERE interrupt_id = $1", intr.id
        )
    )


async def still_allowed(
    conn: Conn,
    requester: str,
    approver: str,
    action: str,
    scope: str,
    run_id: str,
    call_id: str,
) -> bool:
    """At execution (invariant 5's re-check): the requester still holds the tool's grant, and
    everyone who approved still holds what approving took (the tool's grant for the requester
    and for a card without a policy, the policy's approval grant for anyone else)."""
    if not await policy.granted(conn, requester, action, scope):
        return False
    intr = await interrupts.for_call(conn, run_id, call_id)
    if intr is None or not governed(intr):
        return approver == requester or await policy.granted(conn, approver, action, scope)
    rows = await conn.fetch(
        "SELECT approver FROM interrupt_approval WHERE interrupt_id = $1", intr.id
    )
    approvers = ({r["approver"] for r in rows} | {approver}) - {requester}
    assert intr.approval_grant
    return all(
        [await policy.granted(conn, u, intr.approval_grant, intr.scope) for u in sorted(approvers)]
    )


@dataclass(frozen=True)
class Step:
    tool: str
    status: str


@dataclass(frozen=True)
class PendingApproval:
    """One card the caller may decide, as the inbox shows it: the card, who asked, the
    policy, who approved so far, and the run's steps so far (tool and status, no arguments)."""

    interrupt: InterruptView
    requester: str
    agent: str
    approval_grant: str
    approvals_required: int
    approved_by: tuple[str, ...]
    self_approval: bool
    steps: tuple[Step, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        i = self.interrupt
        return {
            "interruptId": i.id,
            "runId": i.run_id,
            "kind": i.kind,
            "payload": i.payload,
            "expiresAt": i.expires_at,
            "requester": self.requester,
            "agent": self.agent,
            "approvalGrant": self.approval_grant,
            "approvalsRequired": self.approvals_required,
            "approvedBy": list(self.approved_by),
            "selfApproval": self.self_approval,
            "steps": [{"tool": s.tool, "status": s.status} for s in self.steps],
        }


async def list_pending(
    conn: Conn, user_id: str, limit: int, after_id: str = ""
) -> list[PendingApproval]:
    """A page of the cards `user_id` may decide now, oldest first, after the card `after_id`:
    their own cards under today's rule, and every governed card whose approval grant they hold
    on its scope (their own only when self-approval is allowed), minus those they already
    approved. Who may decide is filtered in the store's query (store/approval_inbox.py), so a
    page is never emptied by cards the caller may not decide."""
    cards = await approval_inbox.pending(conn, user_id, limit, after_id)
    steps = await _steps(conn, [c.interrupt.run_id for c in cards])
    return [
        PendingApproval(
            InterruptView.of(c.interrupt),
            c.requester,
            c.agent,
            c.interrupt.approval_grant or c.interrupt.action,
            c.interrupt.approvals_required,
            c.approved_by,
            c.interrupt.self_approval,
            steps.get(c.interrupt.run_id, ()),
        )
        for c in cards
    ]


async def _steps(conn: Conn, run_ids: list[str]) -> dict[str, tuple[Step, ...]]:
    if not run_ids:
        return {}
    rows = await conn.fetch(
        "SELECT run_id, tool, status FROM tool_call WHERE run_id = ANY($1::text[]) "
        "ORDER BY run_id, created_at, call_id",
        run_ids,
    )
    out: dict[str, list[Step]] = {}
    for r in rows:
        out.setdefault(r["run_id"], []).append(Step(r["tool"], r["status"]))
    return {k: tuple(v) for k, v in out.items()}
