"""What a tool gives back: a result for the model, or an error that says whether retrying helps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer. `summary` is shown to people (a step in the UI) and to the model; `data`
    goes to the model; `facts` are confirmed business facts the conversation remembers
    (e.g. the instance a later "restart it" refers to)."""

    summary: str
    data: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    ok: bool = True


class ToolError(Exception):
    """The tool failed cleanly: nothing happened, and the model is told `message`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TransientError(ToolError):
    """The tool failed before it had any effect, and trying again later may work (a timeout to
    a dependency, a 503). The engine retries with backoff up to the agent's `Limits`."""


@dataclass(frozen=True)
class Reconciled:
    """What a write tool's `reconcile` learned from the external system about one idempotency
    key after a crash: the call is `done` (with its result), `not_done` (safe to call), or
    `unknown` (a person must decide: retry, mark done or abandon)."""

    status: Literal["done", "not_done", "unknown"]
    result: ToolResult | None = None
    reason: str = ""

    @classmethod
    def done(cls, result: ToolResult) -> Reconciled:
        return cls("done", result)

    @classmethod
    def not_done(cls) -> Reconciled:
        return cls("not_done")

    @classmethod
    def unknown(cls, reason: str = "") -> Reconciled:
        return cls("unknown", reason=reason)
