"""AG-UI's RunAgentInput, checked: what Tether honours is read, what it keeps for itself is
named in the README ("AG-UI"), and anything malformed is a 400 before anything starts.

- `threadId`: the conversation (the caller's own id for it; an unknown one is a new conversation).
- `runId`: the client's id for this run, echoed on every event and the key of its reconnect.
- `messages`: the last one, a user message, is the new turn; the rest is the client's copy of
  the history, which Tether does not read (its stored history wins).
- `resume`: answers to the previous run's interrupts; with it, `messages` are not read.
- `forwardedProps.tether.title`: an optional title for a new conversation; nothing else of
  `forwardedProps` is read. `state`, `tools` and `context` are not read: the agent's state is
  the conversation's facts, its tools are its own (server side)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tether_common.errors import InvalidArgument
from tether_common.input_parsers import storable
from tether_common.message_text import content_text

MAX_TEXT = 8000
MAX_TITLE = 200
MAX_RESUME = 16
# What a client's id may be: a UUID, or any id of this shape (it is echoed and sits in paths).
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,119}")
STATUSES = ("resolved", "cancelled")


@dataclass(frozen=True)
class ResumeEntry:
    interrupt_id: str
    status: str  # "resolved" | "cancelled"
    payload: Any  # None when absent


@dataclass(frozen=True)
class RunInput:
    thread_id: str
    run_id: str
    text: str  # the new turn's text; "" with `resume`
    resume: tuple[ResumeEntry, ...]
    title: str


def client_id(value: object, name: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidArgument(
            f"{name} must be an id of 1 to 120 letters, digits, '.', '_', ':' or '-' (a UUID)"
        )
    return value


def run_input(body: object) -> RunInput:
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be a RunAgentInput JSON object")
    thread_id = client_id(body.get("threadId"), "threadId")
    run_id = client_id(body.get("runId"), "runId")
    messages = body.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidArgument("messages must be a list of message objects")
    resume = resume_entries(body.get("resume"))
    text = "" if resume else _new_turn(messages)
    return RunInput(thread_id, run_id, text, resume, _title(body.get("forwardedProps")))


def resume_entries(raw: object) -> tuple[ResumeEntry, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_RESUME:
        raise InvalidArgument(f"resume must be a list of at most {MAX_RESUME} entries")
    out: list[ResumeEntry] = []
    for entry in raw:
        if not isinstance(entry, dict):
            raise InvalidArgument("each resume entry must be an object")
        interrupt_id = entry.get("interruptId")
        if not isinstance(interrupt_id, str) or not interrupt_id:
            raise InvalidArgument("each resume entry needs its interruptId")
        status = entry.get("status")
        if status not in STATUSES:
            raise InvalidArgument("a resume entry's status must be resolved or cancelled")
        out.append(ResumeEntry(interrupt_id, str(status), entry.get("payload")))
    if len({e.interrupt_id for e in out}) != len(out):
        raise InvalidArgument("resume answers an interrupt more than once")
    return tuple(out)


def _new_turn(messages: list[dict[str, Any]]) -> str:
    """The last message, a user message with text: the turn this run answers."""
    if not messages or messages[-1].get("role") != "user":
        raise InvalidArgument(
            "the last message must be the user's new turn (or send resume to answer an interrupt)"
        )
    text = content_text(messages[-1].get("content"))
    if not text.strip():
        raise InvalidArgument("the user's new turn has no text")
    if len(text) > MAX_TEXT or not storable(text):
        raise InvalidArgument(f"the user's new turn must be at most {MAX_TEXT} storable characters")
    return text


def _title(props: object) -> str:
    if props is None:
        return ""
    if not isinstance(props, dict):
        raise InvalidArgument("forwardedProps must be a JSON object")
    tether = props.get("tether")
    if tether is None:
        return ""
    if not isinstance(tether, dict):
        raise InvalidArgument("forwardedProps.tether must be a JSON object")
    title = tether.get("title", "")
    if not isinstance(title, str) or len(title) > MAX_TITLE or not storable(title):
        raise InvalidArgument(f"forwardedProps.tether.title must be a text of at most {MAX_TITLE}")
    return title
