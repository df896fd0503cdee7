"""The model seam: what an agent's model is asked for one step, and what it streams back.

A model is anything with `stream(request)` yielding text increments, tool calls, questions and
`Usage`, and raising `ModelError` when the provider fails. Tether ships three kinds:
`ScriptedModel` (a deterministic policy function: tests, demos, conformance), and two providers
the engine drives through their official SDKs: `OpenAICompatible` (any OpenAI-compatible chat
completions server) and `Anthropic` (the Messages API)."""

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
    invalid: str = ""
    """Set by a provider when the model's arguments could not be read (not JSON, not an
    object): why. The engine runs nothing and tells the model, as a tool error, to try again."""
    raw_args: str = ""
    """The arguments exactly as the model sent them, when `invalid` is set."""


@dataclass(frozen=True)
class Usage:
    """Tokens a step used, as the provider counted them; a model yields it once per step (or
    several times: the engine adds them up)."""

    input_tokens: int = 0
    output_tokens: int = 0


class ModelError(Exception):
    """A provider failure, as the engine handles it. `retryable` errors (429, 5xx, timeouts, a
    dropped stream) are retried with backoff (at least `retry_after_s` when the provider said
    so); the others end the run with an `error` event carrying `code` and `message` (which
    never holds a key). Codes: MODEL_UNAVAILABLE, MODEL_AUTH_FAILED, MODEL_NOT_FOUND,
    MODEL_REJECTED_REQUEST, MODEL_OUTPUT_TRUNCATED, MODEL_PROTOCOL_ERROR."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        retry_after_s: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.status = status


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
    continue_from: str = ""
    """Text of this step the user has already seen (a retry after the provider dropped the
    stream): the model continues it and must not repeat it. Providers pass it as the start of
    the assistant's answer."""
    purpose: str = "step"
    """"step": a run's step. "summary": fold the earlier turns in `messages` into a short
    summary (no tools); the answer's text becomes the conversation's summary."""

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
Chunk = str | ToolCall | Question | Usage


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

    `delay_s` paces the stream; None takes TETHER_SCRIPTED_DELAY_S (default 0.02).
    `production`: this agent is scripted on purpose; a production runtime (TETHER_ENV=production)
    refuses a scripted model otherwise. Each step reports an estimated `Usage` (4 characters a
    token); a summary request gets an extractive summary, not the policy."""

    def __init__(
        self, policy: Policy, delay_s: float | None = None, *, production: bool = False
    ) -> None:
        self.policy = policy
        self.production = production
        self.delay_s = (
            float(os.environ.get("TETHER_SCRIPTED_DELAY_S") or 0.02) if delay_s is None else delay_s
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        yield Usage(input_tokens=_estimate_request(request))
        if request.purpose == "summary":
            yield _extractive_summary(request)
            return
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
        yield Usage(output_tokens=(sum(len(p) for p in pieces) + 3) // 4)


def _estimate_request(request: ModelRequest) -> int:
    chars = len(request.instructions) + len(request.context)
    chars += sum(len(str(m.get("content") or "")) for m in request.messages)
    return (chars + 3) // 4


def _extractive_summary(request: ModelRequest) -> str:
    """A scripted model's summary: the first sentence of each user turn, newest kept whole."""
    asked = [
        str(m.get("content") or "").split(". ")[0][:120]
        for m in request.messages
        if m.get("role") == "user"
    ]
    return ("Earlier the user asked: " + "; ".join(asked))[-1500:] if asked else ""


def _call_id(request: ModelRequest, index: int) -> str:
    digest = hashlib.sha1(
        json.dumps(request.messages, sort_keys=True, default=str).encode()
    ).hexdigest()
    return f"call_{digest[:12]}_{index}"


@dataclass(frozen=True)
class OpenAICompatible:
    """Chat completions with streaming tool calls on OpenAI or any compatible server (vLLM,
    Ollama, llama.cpp server, LM Studio), driven through the official `openai` SDK. The key is
    read from the file `api_key_file` (a mounted secret) if set, else from the environment
    variable `api_key_env`; it is never stored, logged or returned."""

    model: str = "gpt-4o-mini"
    base_url: str = ""
    """Empty: TETHER_OPENAI_BASE_URL, else OpenAI's own API."""
    api_key_env: str = "TETHER_OPENAI_API_KEY"
    api_key_file: str = ""
    max_output_tokens: int | None = None
    """Per step; None leaves it to the server."""
    timeout_s: float = 120.0
    """Per request, including the whole stream."""

    provider = "openai"


@dataclass(frozen=True)
class Anthropic:
    """The Anthropic Messages API with streaming `tool_use`, driven through the official
    `anthropic` SDK. Key handling as for `OpenAICompatible`."""

    model: str = "claude-sonnet-4-5"
    base_url: str = ""
    """Empty: TETHER_ANTHROPIC_BASE_URL, else Anthropic's own API."""
    api_key_env: str = "TETHER_ANTHROPIC_API_KEY"
    api_key_file: str = ""
    max_output_tokens: int = 4096
    """Per step (the Messages API requires a bound)."""
    timeout_s: float = 120.0

    provider = "anthropic"


Provider = OpenAICompatible | Anthropic
