"""The tool gate (invariant 7): every tool call, start path and resume path alike, asks here
whether this agent may call this tool for this user. `observe` counts and allows; `enforce` blocks."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Literal

from tether_runtime import metrics

log = logging.getLogger(__name__)


class ToolGate:
    def __init__(self, mode: Literal["observe", "enforce"]) -> None:
        self.mode = mode
        self.violations: Counter[tuple[str, str]] = Counter()

    def allows(self, agent: str, allowlist: frozenset[str], tool: str, user_id: str) -> bool:
        if tool in allowlist:
            return True
        self.violations[(agent, tool)] += 1
        metrics.TOOL_GATE_VIOLATIONS.labels(mode=self.mode, agent=agent, tool=tool).inc()
        log.warning(
            "tool gate violation",
            extra={"agent": agent, "tool": tool, "user": user_id, "mode": self.mode},
        )
        return self.mode == "observe"
