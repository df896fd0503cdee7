"""Proto resources -> the browser's camelCase JSON (runs and events: tether_common.event_json)."""

from __future__ import annotations

import json
from typing import Any

from tether.runtime.v1 import resources_pb2
from tether_common.event_json import timestamp_json
from tether_proto import wire


def _facts(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def conversation_json(c: resources_pb2.Conversation) -> dict[str, Any]:
    return {
        "id": c.id,
        "title": c.title,
        "facts": _facts(c.facts_json),
        "summary": c.summary,
        "version": c.version,
        "createdAt": timestamp_json(c.create_time),
        "updatedAt": timestamp_json(c.update_time),
    }


def agent_json(a: resources_pb2.Agent) -> dict[str, Any]:
    return {
        "name": a.name,
        "description": a.description,
        "tools": [
            {
                "name": t.name,
                "description": t.description,
                "effect": t.effect,
                "action": t.action,
                "risk": t.risk,
                **({"origin": t.origin} if t.origin else {}),
            }
            for t in a.tools
        ],
    }


def message_json(m: resources_pb2.Message) -> dict[str, Any]:
    return {
        "id": m.id,
        "conversationId": m.conversation_id,
        "runId": m.run_id or None,
        "role": wire.MESSAGE_ROLE.name_of(m.role),
        "content": m.content,
        "toolCallId": m.tool_call_id or None,
        "createdAt": timestamp_json(m.create_time),
    }
