"""The approvals inbox query: the pending cards one user may decide, oldest first, a page at a
time. Who may decide is filtered here, in the query, before the page's LIMIT: a page holds only
cards the caller may decide, however many other cards wait (issue #35, finding 5).

The rule (approvals.py): a card without an approval policy is its run owner's; a governed card
is anyone's who holds its approval grant on its scope (`grants.matches_sql`, the grant module's
scope rule), the requester's only when self-approval is allowed, and never again the caller's
once they approved it."""

from __future__ import annotations

from dataclasses import dataclass

from tether_runtime.domain.records import InterruptRow
from tether_runtime.store import grants
from tether_runtime.store.db import Conn


@dataclass(frozen=True)
class PendingCard:
    interrupt: InterruptRow
    requester: str  # the run's owner
    agent: str
    approved_by: tuple[str, ...]  # in order


_PENDING = f"""
SELECT i.*, r.user_id AS requester, r.agent AS agent,
       COALESCE((SELECT array_agg(a.approver ORDER BY a.approved_at)
                 FROM interrupt_approval a WHERE a.interrupt_id = i.id), '{{}}') AS approved_by
FROM interrupt i JOIN run r ON r.id = i.run_id
WHERE i.status = 'pending' AND i.kind = 'confirm_action' AND i.expires_at > now()
  AND i.id > $2
  AND CASE
        WHEN coalesce(i.approval_grant, '') = '' THEN r.user_id = $1
        WHEN EXISTS (SELECT 1 FROM interrupt_approval a
                     WHERE a.interrupt_id = i.id AND a.approver = $1) THEN false
        WHEN r.user_id = $1 THEN i.self_approval
        ELSE EXISTS (SELECT 1 FROM "grant" g
                     WHERE g.user_id = $1 AND g.action = i.approval_grant
                       AND {grants.matches_sql("g.scope", "i.scope")})
      END
ORDER BY i.id
LIMIT $3
"""


async def pending(conn: Conn, user_id: str, limit: int, after_id: str) -> list[PendingCard]:
    """At most `limit` cards `user_id` may decide now, after the card `after_id` ("" for the
    first page), by id (interrupt ids sort by creation: oldest first)."""
    rows = await conn.fetch(_PENDING, user_id, after_id, limit)
    return [
        PendingCard(InterruptRow.of(r), r["requester"], r["agent"], tuple(r["approved_by"]))
        for r in rows
    ]
