"""The tool gate (invariant 7): every tool call, start path and resume path alike, asks here
whether this agent may call this tool for this user, and every model step asks which tools to
offer. A tool the agent does not declare, one an operator switched off
(TETHER_TOOL_DENY=agent:tool), or one the operator reserved to holders of a grant
(TETHER_TOOL_ALLOW_GRANT=agent:tool or agent:*) called for a user without `tool.use` on
"agent/tool", is a violation: `observe` counts and allows it (to see what a new rule would
block), `enforce` counts and blocks it. The grant is read through `policy.granted` at every
check, never cached: revoking it stops the next step's offer and the next call."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Literal

from tether_runtime import metrics, policy
from tether_runtime.store.db import Pool

log = logging.getLogger(__name__)

USE = "tool.use"
"""The action a user needs on "agent/tool" for a tool listed in TETHER_TOOL_ALLOW_GRANT."""


def use_scope(agent: str, tool: str) -> str:
    return f"{agent}/{tool}"


class ToolGate:
    def __init__(
        self,
        mode: Literal["observe", "enforce"],
        deny: Collection[str] = frozenset(),
        allow_grant: Collection[str] = frozenset(),
    ) -> None:
        self.mode = mode
        self.deny = frozenset(deny)
        self.allow_grant = frozenset(allow_grant)

    def denied(self, agent: str, tool: str) -> bool:
        return f"{agent}:{tool}" in self.deny

    def needs_grant(self, agent: str, tool: str) -> bool:
        """Whether only holders of `tool.use` on "agent/tool" may use this tool."""
        return f"{agent}:{tool}" in self.allow_grant or f"{agent}:*" in self.allow_grant

    async def _usable(self, pool: Pool, agent: str, tool: str, user_id: str) -> bool:
        if self.denied(agent, tool):
            return False
        if not self.needs_grant(agent, tool):
            return True
        async with pool.acquire() as conn:
            return await policy.granted(conn, user_id, USE, use_scope(agent, tool))

    async def offered(
        self, pool: Pool, agent: str, tools: Sequence[str], user_id: str
    ) -> list[str]:
        """The tools the model may be offered for this user's run, in the agent's order."""
        return [t for t in tools if await self._usable(pool, agent, t, user_id)]

    async def allows(
        self, pool: Pool, agent: str, declared: Collection[str], tool: str, user_id: str
    ) -> bool:
        if tool in declared and await self._usable(pool, agent, tool, user_id):
            return True
        metrics.TOOL_GATE_VIOLATIONS.labels(mode=self.mode, agent=agent, tool=tool).inc()
        log.warning(
            "tool gate violation",
            extra={"agent": agent, "tool": tool, "user": user_id, "mode": self.mode},
        )
        return self.mode == "observe"
