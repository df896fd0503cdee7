"""A tool call's result as stored, shown to the model and summarized in events: one shape for
every kind of tool (native, graph write tools, questions), masked before it leaves the tool."""

from __future__ import annotations

import json
from typing import Any

from tether_common.redaction import redact, redact_value
from tether_sdk import ToolResult


def result_body(result: ToolResult, outcome: str = "") -> dict[str, Any]:
    """A result as stored, shown to the model and summarized in events; masked first (tool
    output can carry secrets: a log line with a token)."""
    # Masked value by value, never as JSON text: a re-parse could fail or change the data.
    data = redact_value(json.loads(json.dumps(result.data, default=str)))
    return {
        "ok": result.ok,
        "summary": redact(result.summary),
        "data": data,
        "facts": result.facts if result.ok else {},
        "outcome": outcome or ("ok" if result.ok else "error"),
    }


def failure(summary: str, outcome: str = "error") -> dict[str, Any]:
    """A result that did not come from the tool; masked too (a tool's error message can quote
    the secret that made it fail)."""
    return {"ok": False, "summary": redact(summary), "data": {}, "facts": {}, "outcome": outcome}
