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
not resumed with a made-up answer.

Whatever the payload, the interrupt carries it whole (`InterruptPayload.value_json`), and it also
takes the answers a LangGraph client gives:
- `respond` with `value_json`: `interrupt()` returns exactly that value (`Command(resume=v)`).
- `approve` / `reject` on a question (any kind but confirm_action): `interrupt()` returns `True`
  / `False`; when the payload is LangGraph's HumanInterrupt (`{"action_request": {"action",
  "args"}, "config", "description"}`, or a list of them, as `langgraph.prebuilt.interrupt`
  sends), `{"type": "accept", "args": None}` / `{"type": "ignore", "args": None}` (a list of one
  per request for a list).

A dict without a "kind" (a plain payload) names no grant (its "action" is only shown), and its
card is read from common keys: title from `title`, else `action` (a string), else a
HumanInterrupt's `action_request.action`, else `question`; the text shown from `prompt`,
`question`, `message`, `text` or `description`, else the payload as JSON; target from `target`,
`resource` or `scope`; the parameters from `summary`, else `args` (or the HumanInterrupt's
`action_request.args`) as `k=v` pairs."""

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
    value: Any = None
    """The payload as the graph gave it (approve/reject answer it by its shape)."""


def _prompt(value: dict[str, Any]) -> str:
    for key in ("prompt", "question", "message", "text"):
        if value.get(key):
            return str(value[key])
    return ""


def is_human_interrupt(value: Any) -> bool:
    """LangGraph's HumanInterrupt (langgraph.prebuilt.interrupt, Agent Inbox's convention)."""
    request = value.get("action_request") if isinstance(value, dict) else None
    return isinstance(request, dict) and "action" in request


def _human_requests(value: Any) -> list[Any] | None:
    """The HumanInterrupts of a payload that is one, or a non-empty list of them; else None."""
    if is_human_interrupt(value):
        return [value]
    if isinstance(value, list) and value and all(is_human_interrupt(v) for v in value):
        return value
    return None


def _pairs(args: Any) -> str:
    if isinstance(args, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(args.items(), key=lambda kv: str(kv[0])))
    return "" if args is None else str(args)


def _plain_question(value: Any) -> Question:
    """A payload outside the convention: a one-field text question whose card is read from the
    payload's common keys (module docstring)."""
    requests = _human_requests(value)
    shown: Any = requests[0] if requests else value
    if not isinstance(shown, dict):
        text = shown if isinstance(shown, str) else json.dumps(shown, default=str)
        fields: dict[str, Any] = {"prompt": text, "schema": TEXT_SCHEMA}
        return Question("provide_input", fields, text_only=True, value=value)
    found = shown.get("action_request")
    request: dict[str, Any] = found if isinstance(found, dict) else {}
    action = shown.get("action")
    title = (
        shown.get("title")
        or (action if isinstance(action, str) else "")
        or request.get("action")
        or shown.get("question")
        or ""
    )
    prompt = _prompt(shown) or shown.get("description") or json.dumps(shown, default=str)
    summary = shown.get("summary") or _pairs(shown.get("args", request.get("args")))
    fields = {
        "prompt": str(prompt),
        "title": str(title),
        "schema": TEXT_SCHEMA,
        "target": str(shown.get("target") or shown.get("resource") or shown.get("scope") or ""),
        "parameter_summary": str(summary or ""),
    }
    return Question("provide_input", fields, text_only=True, value=value)


def question_of(value: Any) -> Question:
    if not isinstance(value, dict) or ("kind" not in value and "schema" not in value):
        return _plain_question(value)
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
        return Question(kind, card, action, scope, value=value)
    if kind == "select_option":
        options = [
            {"value": o, "label": o, "description": ""} if isinstance(o, str) else dict(o)
            for o in value.get("options") or []
        ]
        fields = {"prompt": _prompt(value), "title": title, "options": options}
        return Question(kind, fields, value=value)
    schema = value.get("schema")
    if schema is None:
        return Question(
            kind,
            {"prompt": _prompt(value), "title": title, "schema": TEXT_SCHEMA},
            text_only=True,
            value=value,
        )
    fields = {"prompt": _prompt(value), "title": title, "schema": schema}
    return Question(kind, fields, value=value)


def _verdict(question: Question, approved: bool) -> Any:
    """What approve / reject of a question resume it with (module docstring)."""
    requests = _human_requests(question.value)
    if requests is None:
        return approved
    one = {"type": "accept" if approved else "ignore", "args": None}
    return one if is_human_interrupt(question.value) else [dict(one) for _ in requests]


def resume_value(question: Question, answer: Any) -> Any:
    """What `interrupt()` returns for this answer (`answer`: the host's Answer)."""
    if "value" in answer.data:  # an exact resume value (ResumeRunRequest.value_json)
        return answer.data["value"]
    if question.kind == "confirm_action":
        return answer.decision == "approved"
    if answer.decision in ("approved", "rejected"):
        return _verdict(question, answer.decision == "approved")
    if answer.decision != "responded":
        return UNANSWERED
    if question.kind == "select_option":
        return answer.data.get("option")
    fill = answer.data.get("fill") or {}
    return fill.get("text", "") if question.text_only else fill
