"""useChat's request body, checked: `{id, messages, trigger, messageId}` (DefaultChatTransport's),
and Tether's one extension `tether.resume`. Anything malformed is a 400 before anything starts.

- `id`: the chat, the caller's own id for the conversation (an unknown one is a new conversation).
- `messages`: the full history as the client has it; Tether's stored history wins, so only the
  last message is read. A user message is the new turn (its `id` keys the run: a retried
  request is the same run). An assistant message whose tool part is in state
  `approval-responded` answers that call's approval (`approval: {id, approved, reason?}`).
- `tether.resume`: `[{interruptId, status: "resolved" | "cancelled", payload}]`, the answer to an
  interrupt the AI SDK has no part for (a `data-tether-interrupt` part: select, provide input,
  outcome unknown), exactly AG-UI's `resume[]` entry; `payload` follows the part's
  `responseSchema`. With it, `messages` are not read.
- `trigger`: `submit-message` (the default); `regenerate-message` is refused (Tether's history is
  append-only: ask again instead)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tether_common.errors import InvalidArgument
from tether_common.input_parsers import storable

from tether_gateway.agui.run_input import MAX_TEXT, ResumeEntry, RunInput, client_id, resume_entries


@dataclass(frozen=True)
class ChatRequest:
    chat_id: str
    text: str  # the new turn's text; "" when answering
    turn_id: str  # the new user message's id, or the answered interrupt's id
    answer: ResumeEntry | None

    def run_input(self) -> RunInput:
        """AG-UI's run input for the same start or answer (agui/run_start.py does both): the
        run's client id is derived from the chat and the turn, so a repeated request (a retry,
        a double click on approve) names the same run and is the same start or answer."""
        digest = hashlib.sha256(f"{self.chat_id}\n{self.turn_id}".encode()).hexdigest()[:32]
        resume = (self.answer,) if self.answer else ()
        return RunInput(self.chat_id, f"aisdk:{digest}", self.text, resume, "")


def chat_request(body: object) -> ChatRequest:
    if not isinstance(body, dict):
        raise InvalidArgument("the request body must be useChat's JSON object {id, messages, ...}")
    chat_id = client_id(body.get("id"), "id")
    trigger = body.get("trigger", "submit-message")
    if trigger != "submit-message":
        raise InvalidArgument(
            "only trigger submit-message is served: Tether's history is append-only, so a "
            "message cannot be regenerated (send a new one)"
        )
    messages = body.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidArgument("messages must be a list of UI message objects")
    tether = body.get("tether")
    if tether is not None:
        if not isinstance(tether, dict):
            raise InvalidArgument("tether must be a JSON object")
        entries = resume_entries(tether.get("resume"))
        if len(entries) != 1:
            raise InvalidArgument("tether.resume answers the one interrupt the chat waits on")
        return ChatRequest(chat_id, "", entries[0].interrupt_id, entries[0])
    if not messages:
        raise InvalidArgument("messages must end with the user's new turn or an approval")
    last = messages[-1]
    if last.get("role") == "assistant":
        answer = _approval(last)
        return ChatRequest(chat_id, "", answer.interrupt_id, answer)
    if last.get("role") != "user":
        raise InvalidArgument("the last message must be the user's new turn or an approval")
    turn_id = client_id(last.get("id"), "the user message's id")
    return ChatRequest(chat_id, _text(last), turn_id, None)


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    parts = message.get("parts")
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise InvalidArgument("a message's parts must be a list of objects")
    return parts


def _text(message: dict[str, Any]) -> str:
    chunks = []
    for part in _parts(message):
        if part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise InvalidArgument("a text part's text must be a string")
            chunks.append(text)
    text = "".join(chunks)
    if not text.strip():
        raise InvalidArgument("the user's new turn has no text")
    if len(text) > MAX_TEXT or not storable(text):
        raise InvalidArgument(f"the user's new turn must be at most {MAX_TEXT} storable characters")
    return text


def _approval(message: dict[str, Any]) -> ResumeEntry:
    """The one tool part of the assistant message in state approval-responded, as a resume."""
    responded = [
        p
        for p in _parts(message)
        if str(p.get("type", "")).startswith(("tool-", "dynamic-tool"))
        and p.get("state") == "approval-responded"
    ]
    if len(responded) != 1:
        raise InvalidArgument(
            "an assistant message last must carry one tool part in state approval-responded "
            "(a Tether run waits on one approval at a time)"
        )
    approval = responded[0].get("approval")
    if not isinstance(approval, dict):
        raise InvalidArgument("the approval-responded part needs its approval {id, approved}")
    approval_id, approved = approval.get("id"), approval.get("approved")
    if not isinstance(approval_id, str) or not approval_id or not isinstance(approved, bool):
        raise InvalidArgument("approval needs its id (a string) and approved (true or false)")
    decision = "approve" if approved else "reject"
    return ResumeEntry(approval_id, "resolved", {"decision": decision})
