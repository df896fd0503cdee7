"""The model seam: what an agent's model is asked for one step, and what it streams back.

A model is anything with `stream(request)` yielding text increments and tool calls. Tether ships
two kinds: `ScriptedModel` (a deterministic policy function: tests, demos, conformance) and
`OpenAICompatible` (a provider the engine drives over any OpenAI-compatible chat API)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolSchema:
    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments, derived from the tool function's types."""


@dataclass(frozen=True)
class ToolCall:
    """A step's request to call a tool. `call_id` is the model's own id, if it has one; the
    engine names each call itself (unique within the run, stable once the step is saved)."""

    name: str
    args: dict[str, Any]
    call_id: str = ""


@dataclass(frozen=True)
class Option:
    """One choice of a `SelectOption`: `value` comes back as the answer."""

    value: str
    label: str = ""
    description: str = ""


@dataclass(frozen=True)
class SelectOption:
    """A step asks a person to pick one of `options` (an interrupt of kind select_option). The
    run pauses; the answer comes back as the outcome of a call named "select_option" with
    `data={"option": value}`, and the run continues from its checkpoint."""

    prompt: str
    options: Sequence[Option | str]
    title: str = ""

    def choices(self) -> list[Option]:
        return [o if isinstance(o, Option) else Option(str(o)) for o in self.options]


@dataclass(frozen=True)
class ProvideInput:
    """A step asks a person for missing input (provide_input): `schema` is the JSON schema the
    answer must satisfy (validated by the engine; an invalid fill is refused with 422 and
    changes nothing). The answer comes back as the outcome of a call named "provide_input" with
    `data={"fill": {...}}`."""

    prompt: str
    schema: dict[str, Any]
    title: str = ""


@dataclass(frozen=True)
class ToolOutcome:
    """A tool call's result as the model sees it. `outcome`: ok, error, invalid (arguments did
    not fit the schema), rejected, expired, denied (no grant), skipped (recheck said no need),
    blocked (policy), abandoned, marked_done (a person's answer after an unknown outcome),
    answered (a person answered a SelectOption or ProvideInput)."""

    tool: str
    call_id: str
    ok: bool
    summary: str
    data: dict[str, Any]
    outcome: str


@dataclass(frozen=True)
class ModelRequest:
    """One step's input. `messages` are OpenAI-shaped dicts (role user/assistant/tool, content,
    tool_calls [{id, name, args}], tool_call_id, name), oldest first."""

    instructions: str
    context: str
    """Confirmed facts and the summary of earlier turns, as text for the model."""
    messages: list[dict[str, Any]]
    tools: list[ToolSchema]
    facts: dict[str, Any] = field(default_factory=dict)

    def last_user_text(self) -> str:
        for m in reversed(self.messages):
            if m["role"] == "user":
                return str(m["content"])
        return ""

    def _last_user_index(self) -> int:
        return max((i for i, m in enumerate(self.messages) if m["role"] == "user"), default=-1)

    def results(self) -> list[ToolOutcome]:
        """The tool outcomes since the user's last message, oldest first."""
        out = []
        for m in self.messages[self._last_user_index() + 1 :]:
            if m["role"] != "tool":
                continue
            body = json.loads(m["content"])
            out.append(
                ToolOutcome(
                    tool=str(m.get("name", "")),
                    call_id=str(m.get("tool_call_id", "")),
                    ok=bool(body.get("ok")),
                    summary=str(body.get("summary", "")),
                    data=body.get("data") or {},
                    outcome=str(body.get("outcome", "")),
                )
            )
        return out

    def earlier_messages(self) -> list[dict[str, Any]]:
        """The turns before the user's last message."""
        return self.messages[: max(self._last_user_index(), 0)]


Question = SelectOption | ProvideInput
Chunk = str | ToolCall | Question


@runtime_checkable
class Model(Protocol):
    def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]: ...


Decision = str | Sequence[str] | ToolCall | Sequence[ToolCall] | Question
Policy = Callable[[ModelRequest], Decision]


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text) or [text]


class ScriptedModel:
    """A deterministic model: `policy(request)` decides the step (text, text pieces, or tool
    calls); the text streams word by word. The same transcript always gives the same step, so a
    step retried after a crash repeats itself exactly and the engine skips what was streamed.

    `delay_s` paces the stream; None takes TETHER_SCRIPTED_DELAY_S (default 0.02)."""

    def __init__(self, policy: Policy, delay_s: float | None = None) -> None:
        self.policy = policy
        self.delay_s = (
            float(os.environ.get("TETHER_SCRIPTED_DELAY_S") or 0.02) if delay_s is None else delay_s
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        step = self.policy(request)
        if isinstance(step, SelectOption | ProvideInput):
            yield step
            return
        if isinstance(step, ToolCall) or (
            not isinstance(step, str) and step and isinstance(step[0], ToolCall)
        ):
            calls = [step] if isinstance(step, ToolCall) else list(step)
            for i, call in enumerate(calls):
                assert isinstance(call, ToolCall)
                yield call if call.call_id else ToolCall(call.name, call.args, _call_id(request, i))
            return
        pieces = _words(step) if isinstance(step, str) else [str(p) for p in step]
        for piece in pieces:
            # Even at zero delay, give the event loop a turn: a model is never a busy loop.
            await asyncio.sleep(self.delay_s)
            yield piece


def _call_id(request: ModelRequest, index: int) -> str:
    digest = hashlib.sha1(
        json.dumps(request.messages, sort_keys=True, default=str).encode()
    ).hexdigest()
    return f"call_{digest[:12]}_{index}"


@dataclass(frozen=True)
class OpenAICompatible:
    """A chat-completions model with tool calling on any OpenAI-compatible server. The engine
    drives it; the key is read from the environment variable `api_key_env`, never stored."""

    model: str = "gpt-4o-mini"
    base_url: str = ""
    """Empty: TETHER_OPENAI_BASE_URL."""
    api_key_env: str = "TETHER_OPENAI_API_KEY"
