"""Who may approve a write tool's call: part of the tool's declaration.

    @tool(effect="write", action="instance.restart", scope="{service}/{env}",
          approval=Approval(grant="approve:instance.restart", self_approval=False, approvals=2))

Without `approval=`, the run's owner approves once, with the tool's own grant (`action` on the
call's scope). With it, anyone holding `grant` (default: the tool's `action`) on the call's scope
may decide the card, the requester too unless `self_approval=False`; `approvals=2` needs two
distinct people, and any approver's rejection rejects. The requester still needs the tool's
`action` grant when the call runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

_GRANT = re.compile(r"^[a-z][a-z0-9_-]*([.:][a-z][a-z0-9_-]*)+$")


@dataclass(frozen=True)
class Approval:
    """`grant`: the grant an approver holds on the call's scope ('approve:instance.restart');
    empty: the tool's own action. `self_approval`: whether the requester may be an approver.
    `approvals`: how many distinct people must approve (1 or 2)."""

    grant: str = ""
    self_approval: bool = True
    approvals: int = 1

    def problems(self, tool_name: str) -> list[str]:
        out = []
        if self.grant and not _GRANT.match(self.grant):
            out.append(
                f"tool {tool_name!r}: approval grant must look like 'approve:noun.verb' or "
                f"'noun.verb' (got {self.grant!r})"
            )
        if isinstance(self.approvals, bool) or self.approvals not in (1, 2):
            out.append(f"tool {tool_name!r}: approvals must be 1 or 2 (got {self.approvals!r})")
        flag: object = self.self_approval
        if not isinstance(flag, bool):  # e.g. "no" from a config file
            out.append(f"tool {tool_name!r}: self_approval must be True or False")
        return out

    def resolved(self, action: str) -> Approval:
        """This policy with its grant named (the tool's action when left empty)."""
        return Approval(self.grant or action, self.self_approval, self.approvals)
