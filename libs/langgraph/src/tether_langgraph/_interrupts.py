"""The convention by which a node's `interrupt(payload)` becomes a Tether interrupt, and a
person's answer becomes the value `interrupt()` returns (`Command(resume=...)`).

The kind comes from the payload's "kind"; without one it is `provide_input`:

| payload | Tether interrupt | `interrupt()` returns |
|---|---|---|
| `{"kind": "confirm_action", "title", "risk", "target", "summary", "details", "preview", "action", "scope"}` | a confirmation card; approving needs the grant `action` on `scope` when they are given | `True` if approved, `False` if rejected or expired |
| `{"kind": "select_option", "prompt", "title", "options": ["a", "b"] or [{"value", "label", "description"}]}` | a choice | the chosen option's value |
| `{"kind": "provide_input", "prompt", "title", "schema": {...}}` | a form validated against the JSON schema (type object) | the filled object |
| `{"kind": "provide_input", "prompt"}`, or any non-dict value (its text is the prompt) | a one-field form (`text`) | the text (a string) |

A question that expires (or is cancelled) ends the run with INTERRUPT_UNANSWERED: the graph is
not resumed with a made-up answer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

UNANSWERED = object()
TEXT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "Your answer"}},
    "required": ["text"],
}
_KINDS = ("confirm_action", "provide_input", "select_option")


@dataclass(frozen=True)
class Question:
    kind: str
    fields: dict[str, Any]
    action: str = ""
    scope: str = ""
    text_only: bool = False
    """A provide_input with no schema of its own: answered with the text alone."""


def _prompt(value: dict[str, Any]) -> str:
    for key in ("prompt", "question", "message", "text"):
        if value.get(key):
            return str(value[key])
    return ""


def question_of(value: Any) -> Question:
    if not isinstance(value, dict):
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return Question("provide_input", {"prompt": text, "schema": TEXT_SCHEMA}, text_only=True)
    kind = str(value.get("kind") or "provide_input")
    if kind not in _KINDS:
        kind = "provide_input"
    action, scope = str(value.get("action") or ""), str(value.get("scope") or "")
    title = str(value.get("title") or "")
    if kind == "confirm_action":
        card = {
            "title": title or _prompt(value) or "Approve this action?",
            "risk": str(value.get("risk") or "medium"),
            "target": str(value.get("target") or scope),
            "tool": str(value.get("tool") or ""),
            "parameter_summary": str(value.get("summary") or value.get("parameter_summary") or ""),
            "reason": str(value.get("reason") or ""),
            "details": str(value.get("details") or _prompt(value)),
            "preview": str(value.get("preview") or ""),
        }
        return Question(kind, card, action, scope)
    if kind == "select_option":
        options = [
            {"value": o, "label": o, "description": ""} if isinstance(o, str) else dict(o)
            for o in value.get("options") or []
        ]
        return Question(kind, {"prompt": _prompt(value), "title": title, "options": options})
    schema = value.get("schema")
    if schema is None:
        return Question(
            kind,
            {"prompt": _prompt(value), "title": title, "schema": TEXT_SCHEMA},
            text_only=True,
        )
    return Question(kind, {"prompt": _prompt(value), "title": title, "schema": schema})


def resume_value(question: Question, answer: Any) -> Any:
    """What `interrupt()` returns for this answer (`answer`: the host's Answer)."""
    if question.kind == "confirm_action":
        return answer.decision == "approved"
    if answer.decision != "responded":
        return UNANSWERED
    if question.kind == "select_option":
        return answer.data.get("option")
    fill = answer.data.get("fill") or {}
    return fill.get("text", "") if question.text_only else fill
