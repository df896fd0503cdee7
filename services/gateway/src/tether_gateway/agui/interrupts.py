"""Tether's interrupts as AG-UI's (`RUN_FINISHED.outcome.interrupts[]`), and AG-UI's `resume[]`
entries as Tether's answers (ResumeRun, through the LangGraph view's one answer mapping, so
both protocols answer the same way and a doubled answer is one).

Each interrupt: `id` (Tether's own; `resume[].interruptId` names it), `reason`, `message` (the
card's heading), `responseSchema` (the JSON Schema of the `payload` that answers it),
`expiresAt`, and `metadata.tether` (the card: kind, risk, target, tool, summary, reason, ...)."""

from __future__ import annotations

import json
from typing import Any

from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.errors import InvalidArgument
from tether_proto import wire

from tether_gateway.agui.run_input import ResumeEntry
from tether_gateway.langgraph import answers, messages

CONFIRM = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
SELECT = resources_pb2.INTERRUPT_KIND_SELECT_OPTION
PROVIDE_INPUT = resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT
OUTCOME_UNKNOWN = resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN

REASONS = {
    CONFIRM: "tool_approval",
    SELECT: "select_option",
    PROVIDE_INPUT: "input_required",
    OUTCOME_UNKNOWN: "outcome_unknown",
}
OUTCOME_ANSWERS = ("retry", "mark_done", "abandon")


def _decision_schema(choices: tuple[str, ...], what: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"decision": {"type": "string", "enum": list(choices), "description": what}},
        "required": ["decision"],
        "additionalProperties": False,
    }


def response_schema(kind: int, p: resources_pb2.InterruptPayload) -> dict[str, Any] | None:
    """The JSON Schema of the `payload` that answers an interrupt of this kind."""
    if kind == CONFIRM:
        return _decision_schema(("approve", "reject"), "approve runs the action; reject does not")
    if p.value_json:
        return None  # a graph's own interrupt: `payload` is the value its interrupt() returns
    if kind == SELECT:
        options = [
            {"const": o.value, "title": o.label or o.value}
            | ({"description": o.description} if o.description else {})
            for o in p.options
        ]
        return {
            "type": "object",
            "properties": {"value": {"type": "string", "oneOf": options}},
            "required": ["value"],
            "additionalProperties": False,
        }
    if kind == OUTCOME_UNKNOWN:
        return _decision_schema(
            OUTCOME_ANSWERS,
            "retry calls the tool again with the same idempotency key; mark_done takes it as "
            "done; abandon takes it as not done",
        )
    schema: dict[str, Any] = (
        json.loads(p.input_schema_json) if p.input_schema_json else {"type": "object"}
    )
    return schema


def _message(kind: int, p: resources_pb2.InterruptPayload) -> str:
    if p.title:
        return p.title
    target = f" on {p.target}" if p.target else ""
    if kind == CONFIRM:
        return f"Approve {p.tool or 'the action'}{target}?"
    if kind == OUTCOME_UNKNOWN:
        return f"Did {p.tool or 'the action'}{target} happen? Retry, mark it done, or abandon it."
    if kind == SELECT:
        return "Choose an option."
    return "Provide the requested input."


def interrupt_json(i: events_pb2.InterruptRaised) -> dict[str, Any]:
    """AG-UI's Interrupt for a raised Tether interrupt (optional fields left out, never null)."""
    out: dict[str, Any] = {
        "id": i.interrupt_id,
        "reason": REASONS.get(i.kind, "input_required"),
        "message": _message(i.kind, i.payload),
    }
    if i.call_id:
        out["toolCallId"] = i.call_id
    schema = response_schema(i.kind, i.payload)
    if schema is not None:
        out["responseSchema"] = schema
    if i.HasField("expire_time"):
        out["expiresAt"] = i.expire_time.ToJsonString()
    card = messages.interrupt_value(i.kind, i.payload)
    out["metadata"] = {"tether": {"kind": wire.INTERRUPT_KIND.name_of(i.kind), "card": card}}
    return out


def answer(interrupt: resources_pb2.Interrupt, entry: ResumeEntry) -> answers.Answer:
    """The Tether answer a resume entry gives. `cancelled` declines: a confirmation is
    rejected; another kind has no declining answer (cancel the run instead)."""
    kind = interrupt.kind
    if entry.status == "cancelled":
        if kind == CONFIRM:
            return answers.Answer(events_pb2.DECISION_REJECTED)
        raise InvalidArgument(
            "only a confirmation can be cancelled (it is rejected): answer this interrupt with "
            "status resolved and a payload its responseSchema allows"
        )
    value = entry.payload
    if value is None:
        raise InvalidArgument("a resolved resume entry needs the payload its responseSchema names")
    if (
        kind == CONFIRM
        and isinstance(value, dict)
        and value.get("decision") in ("approve", "reject")
    ):
        value = value["decision"] == "approve"  # a graph's confirmation too: True or False
    elif isinstance(value, dict) and not interrupt.payload.value_json:
        if kind == SELECT:
            value = value.get("value")
        elif kind == OUTCOME_UNKNOWN:
            value = value.get("decision")
    return answers.answer(interrupt, value)


def idempotency_key(conversation_id: str, interrupt_id: str, ans: answers.Answer) -> str:
    """The same answer to the same interrupt is one key however its payload was spelled."""
    return answers.idempotency_key(
        conversation_id, interrupt_id, [ans.decision, ans.input, ans.value_json]
    )
