"""A LangGraph run request's body (runs.create / stream / wait), checked: what Tether can honour
is read, the fields the SDK always sends that Tether has no use for are ignored, and a value
Tether cannot honour is a 422, never silently dropped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tether_common.errors import InvalidArgument
from tether_common.input_parsers import storable
from tether_common.message_text import user_text_of

from tether_gateway.langgraph.frames import MODES

MAX_TEXT = 8000
MULTITASK = ("reject", "enqueue", "interrupt", "rollback")
# Modes a client may ask for that carry nothing from Tether (no debug or checkpoint stream).
_SILENT_MODES = ("debug", "events", "tasks", "checkpoints")


@dataclass(frozen=True)
class RunRequest:
    assistant_id: str
    input: dict[str, Any] | None
    resume: Any
    has_resume: bool
    stream_mode: frozenset[str]
    multitask_strategy: str
    if_not_exists: str
    on_disconnect: str


def _choice(body: dict[str, Any], name: str, choices: tuple[str, ...], default: str) -> str:
    value = body.get(name)
    if value is None:
        return default
    if value not in choices:
        raise InvalidArgument(f"{name} must be one of {', '.join(choices)}")
    return str(value)


def stream_modes(raw: object, default: tuple[str, ...] = ("values",)) -> frozenset[str]:
    if raw is None or raw == "" or raw == []:
        return frozenset(default)
    modes = [raw] if isinstance(raw, str) else raw
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise InvalidArgument("stream_mode must be a mode or a list of modes")
    unknown = sorted(set(modes) - set(MODES) - set(_SILENT_MODES))
    if unknown:
        raise InvalidArgument(f"unknown stream_mode {unknown[0]!r}")
    return frozenset(modes)


def query_modes(values: list[str]) -> list[str]:
    """A join's `stream_mode` query values: repeated (`langgraph-sdk`, Python) or one JSON list
    (`@langchain/langgraph-sdk` sends `stream_mode=["values","updates"]`); empty ones are none."""
    modes: list[str] = []
    for value in values:
        if value.startswith("["):
            try:
                listed = json.loads(value)
            except ValueError as err:
                raise InvalidArgument("stream_mode is not a mode or a JSON list of modes") from err
            if not isinstance(listed, list) or not all(isinstance(m, str) for m in listed):
                raise InvalidArgument("stream_mode is not a mode or a JSON list of modes")
            modes.extend(listed)
        elif value:
            modes.append(value)
    return modes


def run_request(body: object, *, default_disconnect: str = "continue") -> RunRequest:
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a JSON object")
    assistant = body.get("assistant_id")
    if not isinstance(assistant, str) or not assistant or len(assistant) > 200:
        raise InvalidArgument("assistant_id is required: an assistant id or a graph name")
    data = body.get("input")
    if data is not None and not isinstance(data, dict):
        raise InvalidArgument("input must be a JSON object")
    command = body.get("command")
    if command is not None and not isinstance(command, dict):
        raise InvalidArgument("command must be a JSON object")
    command = command or {}
    if set(command) - {"resume"}:
        raise InvalidArgument("only command.resume is supported (no goto, no update)")
    if body.get("checkpoint") or body.get("checkpoint_id"):
        raise InvalidArgument("runs from a checkpoint are not supported")
    if body.get("interrupt_before") or body.get("interrupt_after"):
        raise InvalidArgument("interrupt_before / interrupt_after are not supported")
    return RunRequest(
        assistant_id=assistant,
        input=data,
        resume=command.get("resume"),
        has_resume="resume" in command,
        stream_mode=stream_modes(body.get("stream_mode")),
        multitask_strategy=_choice(body, "multitask_strategy", MULTITASK, "enqueue"),
        if_not_exists=_choice(body, "if_not_exists", ("create", "reject"), "reject"),
        on_disconnect=_choice(body, "on_disconnect", ("cancel", "continue"), default_disconnect),
    )


def input_text(data: dict[str, Any] | None) -> str:
    """The text of the input's last human message: what a Tether run starts from."""
    given = (data or {}).get("messages") or []
    if not isinstance(given, list):
        raise InvalidArgument("input.messages must be a list of messages")
    found = user_text_of({"messages": given})
    if not found.strip():
        raise InvalidArgument("input.messages needs a human message with text")
    if len(found) > MAX_TEXT or not storable(found):
        raise InvalidArgument(f"the message must be at most {MAX_TEXT} storable characters")
    return found


def count_field(body: dict[str, Any], name: str, default: int, most: int) -> int:
    """A body's non-negative whole number (limit, offset), at most `most`."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise InvalidArgument(f"{name} must be a whole number from 0 to {most}")
    return value
