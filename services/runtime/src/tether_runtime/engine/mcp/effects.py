"""What an MCP tool does, as Tether enforces it: its effect, how it stays at-most-once, its risk
and grant, derived from the tool's annotations (hints the server gives, which MCP itself never
enforces) with safe defaults, and an override (the agent's, then an operator's) over both.

| annotations                              | effect | after a crash inside the call         |
|------------------------------------------|--------|---------------------------------------|
| readOnlyHint: true                       | read   | called again (a read changes nothing) |
| readOnlyHint false/absent, idempotentHint: true | write, card | called again, same arguments and key |
| readOnlyHint false/absent, otherwise     | write, card | outcome_unknown: a person decides |
| no annotations at all                    | write, card | outcome_unknown: a person decides |

A write's card risk is "high" unless `destructiveHint: false` ("medium"): MCP's own default for
destructiveHint is true. `openWorldHint` changes nothing (it is shown by `tether agents`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether_sdk import Approval, MCPOverride, MCPServer
from tether_sdk._tools import Risk, Scope

SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64
"""What OpenAI and Anthropic accept of a tool's name: 1-64 of [a-zA-Z0-9_-]."""


def model_name(server: str, tool: str) -> str:
    """The name the model sees: `<server>__<tool>`, characters the providers refuse replaced by
    '_', and past 64 characters cut with a short hash of the whole (still unique)."""
    name = server + SEPARATOR + _UNSAFE.sub("_", tool)
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return name[: MAX_NAME - 9] + "_" + digest


@dataclass(frozen=True)
class Derived:
    effect: str
    idempotent: bool
    risk: Risk
    action: str
    scope: Scope | None
    approval: Approval | None = None
    timeout_s: float | None = None
    summary: Scope | None = None
    deny: bool = False
    examples: tuple[dict[str, Any], ...] | None = None
    """The override's argument sets for `tether conformance` (None: the inputSchema's)."""
    why: dict[str, str] = field(default_factory=dict)
    """field -> where its value came from (an annotation, a default, an override)"""

    @property
    def after_crash(self) -> str:
        if self.effect == "read":
            return "called again"
        return "called again with the same key" if self.idempotent else "outcome_unknown"


def _hint(annotations: Mapping[str, Any] | None, name: str) -> bool | None:
    if not annotations:
        return None
    value = annotations.get(name)
    return value if isinstance(value, bool) else None


def derive(
    server: MCPServer,
    tool: str,
    annotations: Mapping[str, Any] | None,
    *overrides: MCPOverride | None,
) -> Derived:
    """The tool's policy: its annotations (camelCase, as on the wire) with safe defaults, then
    each override in turn (the agent's, then the operator's), each field it sets winning."""
    why: dict[str, str] = {}
    read_only = _hint(annotations, "readOnlyHint")
    if read_only is True:
        effect, why["effect"] = "read", "readOnlyHint: true"
    elif read_only is False:
        effect, why["effect"] = "write", "readOnlyHint: false"
    else:
        effect = "write"
        why["effect"] = "no annotations: a write" if not annotations else "no readOnlyHint: a write"
    idempotent_hint = _hint(annotations, "idempotentHint")
    idempotent = idempotent_hint is True
    why["idempotent"] = (
        f"idempotentHint: {str(idempotent_hint).lower()}"
        if idempotent_hint is not None
        else "no idempotentHint: not idempotent"
    )
    destructive = _hint(annotations, "destructiveHint")
    risk: Risk = "medium" if destructive is False else "high"
    why["risk"] = (
        f"destructiveHint: {str(destructive).lower()}"
        if destructive is not None
        else "no destructiveHint: destructive"
    )
    action: str | None = None
    scope: Scope | None = None
    approval: Approval | None = None
    timeout_s = server.timeout_s
    summary: Scope | None = None
    deny = False
    examples: tuple[dict[str, Any], ...] | None = None
    for i, o in enumerate(overrides):
        if o is None:
            continue
        source = "override" if i == 0 else "operator override"
        if o.effect is not None:
            effect, why["effect"] = o.effect, source
        if o.idempotent is not None:
            idempotent, why["idempotent"] = o.idempotent, source
        if o.risk is not None:
            risk, why["risk"] = o.risk, source
        if o.action is not None:
            action, why["action"] = o.action, source
        if o.scope is not None:
            scope, why["scope"] = o.scope, source
        if o.approval is not None:
            approval = o.approval
        if o.timeout_s is not None:
            timeout_s = o.timeout_s
        if o.summary is not None:
            summary = o.summary
        if o.examples is not None:
            examples = tuple(dict(e) for e in o.examples)
        deny = deny or o.deny
    if action is None:
        # A write needs a grant: by default the server's own action, on the tool's name. A read
        # stays open to every user unless an override names the grant it needs.
        action = server.default_action if effect == "write" else ""
        why.setdefault("action", "default")
    if scope is None and action:
        scope = tool.replace("{", "{{").replace("}", "}}")
        why.setdefault("scope", "default: the tool's name")
    if effect == "read":
        idempotent = False  # a read is called again anyway; the flag is a write's
    return Derived(
        effect=effect,
        idempotent=idempotent,
        risk=risk,
        action=action,
        scope=scope,
        approval=approval if effect == "write" else None,
        timeout_s=timeout_s,
        summary=summary,
        deny=deny,
        examples=examples,
        why=why,
    )
