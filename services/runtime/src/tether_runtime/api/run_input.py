"""What a run starts from: StartRun's `text`, or its `input_json` (a graph's input as a JSON
object, issue 30). A graph agent gets the object whole; a native agent the text of its last
user message; the conversation stores a text either way (the user's message)."""

from __future__ import annotations

import json
from typing import Any

from tether_common.errors import InvalidArgument
from tether_common.input_parsers import json_document
from tether_common.message_text import user_text_of

MAX_TEXT = 8000
MAX_INPUT_JSON = 256_000
"""Characters of `input_json`: a graph's input may carry more than one message (a whole state)."""


def run_input(text: str, input_json: str, *, graph: bool) -> tuple[str, dict[str, Any] | None]:
    """(the user's message as stored, the graph's input or None): INVALID_ARGUMENT, changing
    nothing, for an empty start, a text or input over its limit, an `input_json` that is not a
    JSON object, or one a native agent finds no user message in."""
    text = text.strip()
    if len(text) > MAX_TEXT:
        raise InvalidArgument(f"text is longer than {MAX_TEXT} characters")
    if not input_json:
        if not text:
            raise InvalidArgument("text or input_json is required")
        return text, None
    if len(input_json) > MAX_INPUT_JSON:
        raise InvalidArgument(f"input_json is longer than {MAX_INPUT_JSON} characters")
    parsed = json_document(input_json, "input_json")
    if not isinstance(parsed, dict):
        raise InvalidArgument("input_json must be a JSON object")
    said = user_text_of(parsed).strip()
    if not graph:
        if not said:
            raise InvalidArgument(
                "input_json has no user message (messages[-1] with role user) for this agent"
            )
        return (text or said)[:MAX_TEXT], None
    # A graph's input need not hold a message: the conversation shows the input itself.
    shown = text or said or json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
    return shown[:MAX_TEXT], parsed
