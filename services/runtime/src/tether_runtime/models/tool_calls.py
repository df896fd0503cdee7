"""Tool calls on the wire: reading the model's argument text into a `ToolCall` (or an invalid
one the engine can report back), and call ids both APIs accept."""

from __future__ import annotations

import hashlib
import json
import re

from tether_sdk import ToolCall

_WIRE_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


def wire_call_id(call_id: str) -> str:
    """The id sent to a provider for one of the engine's calls. Anthropic accepts only
    `[A-Za-z0-9_-]`, OpenAI at most 40 characters; anything else is replaced by a stable hash,
    so the assistant's call and its tool result still carry the same id."""
    if _WIRE_ID.match(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:32]


def read_call(name: str, raw: str, call_id: str) -> ToolCall:
    """A `ToolCall` from the arguments text the model streamed. Not JSON, or JSON that is not an
    object: the call comes back `invalid` with the text as sent, and the engine tells the
    model. Empty text means no arguments."""
    if not raw.strip():
        return ToolCall(name, {}, call_id)
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as err:
        return ToolCall(
            name, {}, call_id, invalid=f"arguments are not valid JSON ({err.msg})", raw_args=raw
        )
    if not isinstance(args, dict):
        return ToolCall(
            name,
            {},
            call_id,
            invalid=f"arguments must be a JSON object, not {type(args).__name__}",
            raw_args=raw,
        )
    return ToolCall(name, args, call_id)
