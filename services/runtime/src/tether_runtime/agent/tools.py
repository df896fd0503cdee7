"""What a tool is to the engine: a spec, whether it mutates, and how to run, recheck and reconcile it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tether_common.redaction import redact

from tether_runtime.agent.model import ToolSpec
from tether_runtime.store.db import Pool


@dataclass(frozen=True)
class ToolContext:
    pool: Pool
    run_id: str
    user_id: str


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    summary: str
    data: dict[str, Any]
    # Confirmed facts this validated result establishes (service, env, instance_id).
    facts: dict[str, Any] = field(default_factory=dict)

    def masked(self) -> ToolResult:
        """Tool output can carry secrets (a log line with a token): mask before it is stored,
        shown to the model or streamed."""
        data = json.loads(redact(json.dumps(self.data, default=str)))
        return ToolResult(self.ok, redact(self.summary), data, self.facts)

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "summary": self.summary, "data": self.data, "facts": self.facts}

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> ToolResult:
        return cls(
            bool(v.get("ok")), str(v.get("summary", "")), v.get("data") or {}, v.get("facts") or {}
        )


class Tool:
    spec: ToolSpec
    mutating = False
    # For mutating tools: the grant needed, e.g. "instance.restart".
    action = ""
    risk = "low"

    @property
    def name(self) -> str:
        return self.spec.name

    def scope(self, args: dict[str, Any]) -> str:
        return "*"

    def summarize(self, args: dict[str, Any]) -> str:
        return redact(", ".join(f"{k}={v}" for k, v in sorted(args.items())))

    def target(self, args: dict[str, Any]) -> str:
        return self.summarize(args)

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        raise NotImplementedError

    async def recheck(self, ctx: ToolContext, args: dict[str, Any]) -> str | None:
        """Reload the resource before acting; a reason not to act if the world changed."""
        return None

    async def reconcile(
        self, ctx: ToolContext, args: dict[str, Any], key: str
    ) -> ToolResult | None:
        """After a crash mid-call: what the external system says this key already did, if anything."""
        return None
