"""What a tool sees of its run: who asked, who approved, its idempotency key, its deadline, a
logger and a progress channel. No engine internals: no database pool, no lease, no events."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Progress = Callable[[float, str], Awaitable[None]]
Ask = Callable[[str, str, dict[str, Any], float], Awaitable[tuple[str, dict[str, Any] | None]]]
"""The engine's way for a tool to ask a person a question during its call (an MCP server's
elicitation): (title, prompt, a JSON schema of type object, the longest wait in seconds) ->
(action, content), the action "accept" (with the content, valid against the schema), "decline"
or "cancel"."""


async def _no_progress(fraction: float, text: str) -> None:
    return None


@dataclass(frozen=True)
class ToolContext:
    run_id: str
    conversation_id: str
    requester: str
    """The user whose request started the run."""
    approver: str | None
    """Who approved this call (write tools), else None."""
    idempotency_key: str
    """Stable for this call across retries, crashes and pods: pass it to the external system."""
    deadline: float
    """time.time() after which the engine stops waiting for this call."""
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    state: Any = None
    """What the agent's `lifespan` yielded (a connection pool, a client), shared by its tools."""
    attempt: int = 1
    """1 for the first call; more when the engine calls again (transient error, crash)."""
    _progress: Progress = field(default=_no_progress, repr=False)
    _ask: Ask | None = field(default=None, repr=False)
    """Set by the engine for a call in progress (None: nobody can be asked: a card, a recheck)."""

    async def progress(self, fraction: float, text: str = "") -> None:
        """Stream a `tool_progress` event (fraction in 0..1) to everyone following the run."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress fraction must be within 0..1, not {fraction}")
        await self._progress(fraction, text[:200])

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.time())
