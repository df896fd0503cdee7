"""LangChain's message dicts (what LangGraph's `messages` state key holds on the wire) for
Tether's stored messages and for what a run's events say, and the interrupt value a LangGraph
client reads for a Tether interrupt."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tether.runtime.v1 import resources_pb2
from tether_proto import wire

from tether_gateway.langgraph import ids

_ROLE_TYPE = {
    resources_pb2.MESSAGE_ROLE_USER: "human",
    resources_pb2.MESSAGE_ROLE_ASSISTANT: "ai",
    resources_pb2.MESSAGE_ROLE_TOOL: "tool",
}


def human(content: str, message_id: str) -> dict[str, Any]:
    return _base("human", content, message_id)


def ai(
    content: str, message_id: str, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        **_base("ai", content, message_id),
        "tool_calls": tool_calls or [],
        "invalid_tool_calls": [],
        "usage_metadata": None,
    }


def ai_chunk(delta: str, message_id: str) -> dict[str, Any]:
    return {**ai(delta, message_id), "type": "AIMessageChunk", "tool_call_chunks": []}


def tool(content: str, call_id: str, name: str, *, ok: bool = True) -> dict[str, Any]:
    return {
        **_base("tool", content, f"{call_id}:result"),
        "name": name,
        "tool_call_id": call_id,
        "artifact": None,
        "status": "success" if ok else "error",
    }


def tool_call(call_id: str, name: str, args_summary: str) -> dict[str, Any]:
    # Tether streams a masked summary of the arguments, never the arguments themselves.
    args: dict[str, Any] = {"summary": args_summary} if args_summary else {}
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def stored(m: resources_pb2.Message) -> dict[str, Any]:
    kind = _ROLE_TYPE.get(m.role, "human")
    if kind == "ai":
        return ai(m.content, m.id)
    if kind == "tool":
        return {**tool(m.content, m.tool_call_id, ""), "id": m.id}
    return human(m.content, m.id)


def _base(kind: str, content: str, message_id: str) -> dict[str, Any]:
    return {
        "content": content,
        "additional_kwargs": {},
        "response_metadata": {},
        "type": kind,
        "name": None,
        "id": message_id,
        "example": False,
    }


def interrupt_id(tether_interrupt_id: str) -> str:
    """LangGraph's interrupt ids are 32 hex digits: derived from the Tether interrupt's id (a
    resume names no interrupt: it answers the thread's pending one)."""
    return uuid.uuid5(ids.NAMESPACE, f"interrupt:{tether_interrupt_id}").hex


def interrupt_value(kind: int, p: resources_pb2.InterruptPayload) -> Any:
    """What the graph passed to `interrupt()`, whole (`value_json`); for a native agent's card,
    the value a graph would have passed for it (tether_langgraph's convention, `_interrupts.py`),
    its empty fields left out."""
    if p.value_json:
        return json.loads(p.value_json)
    value: dict[str, Any] = {
        "kind": wire.INTERRUPT_KIND.name_of(kind),
        "title": p.title,
        "risk": p.risk,
        "target": p.target,
        "tool": p.tool,
        "summary": p.parameter_summary,
        "reason": p.reason,
        "details": p.details,
        "preview": p.preview,
    }
    if p.options:
        value["options"] = [
            {"value": o.value, "label": o.label or o.value, "description": o.description}
            for o in p.options
        ]
    if p.input_schema_json:
        value["schema"] = json.loads(p.input_schema_json)
    return {k: v for k, v in value.items() if v not in ("", None)}
