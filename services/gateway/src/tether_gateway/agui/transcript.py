"""The conversation as AG-UI messages, for MESSAGES_SNAPSHOT: Tether's stored messages before
the run (its own user message included), then what the run's earlier AG-UI runs streamed,
folded as AG-UI's client folds its events (text into assistant messages, tool calls into their
parent's `toolCalls`, results as tool messages), so the ids are the ones the client already has."""

from __future__ import annotations

from typing import Any

from tether.runtime.v1 import resources_pb2

_ROLES = {
    resources_pb2.MESSAGE_ROLE_USER: "user",
    resources_pb2.MESSAGE_ROLE_ASSISTANT: "assistant",
    resources_pb2.MESSAGE_ROLE_TOOL: "tool",
}


def stored(m: resources_pb2.Message) -> dict[str, Any]:
    role = _ROLES.get(m.role, "user")
    out: dict[str, Any] = {"id": m.id, "role": role, "content": m.content}
    if role == "tool":
        out["toolCallId"] = m.tool_call_id
    return out


class Transcript:
    """AG-UI messages built from the events a run streamed."""

    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        self.messages: list[dict[str, Any]] = list(messages or [])
        self._calls: dict[str, dict[str, Any]] = {}

    def _find(self, message_id: str) -> dict[str, Any] | None:
        return next((m for m in self.messages if m["id"] == message_id), None)

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START" and self._find(event["messageId"]) is None:
            self.messages.append({"id": event["messageId"], "role": "assistant", "content": ""})
        elif kind == "TEXT_MESSAGE_CONTENT" and (m := self._find(event["messageId"])):
            m["content"] = m.get("content", "") + event["delta"]
        elif kind == "TOOL_CALL_START":
            parent = (
                self._find(event.get("parentMessageId", "")) if "parentMessageId" in event else None
            )
            if parent is None or parent["role"] != "assistant":
                parent = {"id": event["toolCallId"], "role": "assistant", "toolCalls": []}
                self.messages.append(parent)
            call = {"id": event["toolCallId"], "type": "function"}
            call["function"] = {"name": event["toolCallName"], "arguments": ""}
            parent.setdefault("toolCalls", []).append(call)
            self._calls[event["toolCallId"]] = call
        elif kind == "TOOL_CALL_ARGS" and (c := self._calls.get(event["toolCallId"])):
            c["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            self.messages.append(
                {
                    "id": event["messageId"],
                    "role": "tool",
                    "content": event["content"],
                    "toolCallId": event["toolCallId"],
                }
            )

    def snapshot(self) -> list[dict[str, Any]]:
        return [
            {**m, "toolCalls": [{**c, "function": dict(c["function"])} for c in m["toolCalls"]]}
            if "toolCalls" in m
            else dict(m)
            for m in self.messages
        ]
