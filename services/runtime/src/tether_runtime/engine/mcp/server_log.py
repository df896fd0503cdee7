"""A server's log notifications (`notifications/message`) into the run's log: the runtime's JSON
log line carrying the run's and conversation's ids (as every line a run's task writes does), so
an operator follows one run across pods by its id. Masked (a server's log line can carry a token)
and bounded: a server that floods cannot flood the runtime's log; what is dropped is counted and
said once the flood ebbs or the call ends.

MCP does not say which call a notification belongs to: a line is the run's while exactly one call
is in flight on the connection; otherwise it is the server's own (no run id), and said so."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import mcp_types
from tether_common.logging import conversation_id_var, run_id_var
from tether_common.redaction import redact

log = logging.getLogger(__name__)

TEXT_LIMIT = 2000
"""Characters of one line kept."""
BURST = 50
"""Lines a connection may log at once ..."""
PER_S = 10.0
"""... and then per second."""
SAY_DROPPED_S = 10.0
"""During a flood, how often the count of dropped lines is said (and always at a call's end)."""

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.WARNING,  # the server's error, not the runtime's
    "critical": logging.WARNING,
    "alert": logging.WARNING,
    "emergency": logging.WARNING,
}


@dataclass(frozen=True)
class CallOf:
    """Whose a call in flight is: its run, conversation and tool, as its task knew them."""

    run_id: str
    conversation_id: str
    tool: str

    @classmethod
    def current(cls, tool: str) -> CallOf:
        return cls(run_id_var.get(), conversation_id_var.get(), tool)


@dataclass
class ServerLog:
    """One connection's log lines: a token bucket (BURST, PER_S) and the count dropped."""

    server: str
    tokens: float = BURST
    at: float = field(default_factory=time.monotonic)
    dropped: int = 0
    said_at: float = float("-inf")

    def _allowed(self) -> bool:
        now = time.monotonic()
        self.tokens = min(BURST, self.tokens + (now - self.at) * PER_S)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.dropped += 1
        return False

    def line(self, params: mcp_types.LoggingMessageNotificationParams, calls: list[CallOf]) -> None:
        if not self._allowed():
            return
        one = calls[0] if len(calls) == 1 else None
        extra: dict[str, str] = {"mcp_server": self.server, "mcp_level": str(params.level)}
        if params.logger:
            extra["mcp_logger"] = redact(str(params.logger))[:200]
        if one is not None:
            extra.update(run_id=one.run_id, conversation_id=one.conversation_id, tool=one.tool)
        if time.monotonic() - self.said_at >= SAY_DROPPED_S:
            self.flush(one)
        whose = "" if one is not None else f" ({len(calls)} calls in flight: not a run's)"
        log.log(
            _LEVELS.get(str(params.level), logging.INFO),
            "MCP server %r logged%s: %s",
            self.server,
            whose,
            redact(str(params.data))[:TEXT_LIMIT],
            extra=extra,
        )

    def flush(self, call: CallOf | None) -> None:
        """Say how many lines were dropped since last said: at a call's end, and during a flood
        before a line let through, at most every SAY_DROPPED_S."""
        if not self.dropped:
            return
        dropped, self.dropped = self.dropped, 0
        self.said_at = time.monotonic()
        extra = {"mcp_server": self.server}
        if call is not None:
            extra.update(run_id=call.run_id, conversation_id=call.conversation_id, tool=call.tool)
        log.warning(
            "MCP server %r: %d log lines dropped (more than %d at once or %g a second)",
            self.server,
            dropped,
            BURST,
            PER_S,
            extra=extra,
        )
