"""The tool gate (invariant 7): every tool call, start path and resume path alike, asks here
whether this agent may call this tool for this user. A tool the agent does not declare, or one an
operator switched off (TETHER_TOOL_DENY=agent:tool), is a violation: `observe` counts and allows
it (to see what a new rule would block), `enforce` counts and blocks it."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Literal

from tether_runtime import metrics

log = logging.getLogger(__name__)


class ToolGate:
    def __init__(
        self, mode: Literal["observe", "enforce"], deny: Collection[str] = frozenset()
    ) -> None:
        self.mode = mode
        self.deny = frozenset(deny)

    def denied(self, agent: str, tool: str) -> bool:
        return f"{agent}:{tool}" in self.deny

    def allows(self, agent: str, declared: Collection[str], tool: str, user_id: str) -> bool:
        if tool in declared and not self.denied(agent, tool):
            return True
        metrics.TOOL_GATE_VIOLATIONS.labels(mode=self.mode, agent=agent, tool=tool).inc()
        log.warning(
            "tool gate violation",
            extra={"agent": agent, "tool": tool, "user": user_id, "mode": self.mode},
        )
        return self.mode == "observe"
