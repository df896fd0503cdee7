"""Chat completions through the official `openai` SDK, for OpenAI and any compatible server
(vLLM, Ollama, llama.cpp, LM Studio): streamed text, tool calls assembled from their fragments,
usage, and every failure as a `ModelError`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai
from tether_sdk import ModelRequest, OpenAICompatible, ToolCall, Usage
from tether_sdk._model import Chunk

from tether_runtime.models.continuation import RepeatFilter
from tether_runtime.models.errors import (
    Origin,
    dropped,
    protocol_error,
    truncated,
)
from tether_runtime.models.guarded import guarded_stream
from tether_runtime.models.keys import Secret
from tether_runtime.models.prompt import CONTINUE_INSTRUCTION, summary_transcript, system_text
from tether_runtime.models.tool_calls import read_call, wire_call_id

OPENAI_BASE_URL = "https://api.openai.com/v1"


class OpenAIProvider:
    """One agent's OpenAI-compatible model. Holds one SDK client (one connection pool) for all
    of the agent's steps; the SDK never retries (`max_retries=0`): the engine does, with its own
    backoff and with what the user has already seen."""

    provider = "openai"
    continues_text = True
    """Honours ModelRequest.continue_from: the engine retries a dropped step from the text shown."""

    def __init__(
        self,
        config: OpenAICompatible,
        *,
        base_url: str,
        api_key: str | Secret,
        agent: str = "",
    ) -> None:
        key = api_key if isinstance(api_key, Secret) else Secret(api_key)
        self.model = config.model
        self.base_url = (base_url or OPENAI_BASE_URL).rstrip("/")
        self.max_output_tokens = config.max_output_tokens
        self.timeout_s = config.timeout_s
        official = urlsplit(self.base_url).hostname == "api.openai.com"
        # OpenAI's newer models refuse `max_tokens`; compatible servers know only `max_tokens`.
        self._limit_param = "max_completion_tokens" if official else "max_tokens"
        self._origin = Origin(
            "OpenAI" if official else "OpenAI-compatible server", config.model, agent, key
        )
        # A keyless local server: the SDK insists on a key, so it gets a placeholder and every
        # request omits the Authorization header (the SDK checks that per request).
        self._headers: dict[str, Any] = {} if key else {"Authorization": openai.Omit()}
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=key.reveal() or "no-key",
            max_retries=0,
            timeout=httpx2.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0)),
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        await self._client.close()

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The chat-completions request for one step (public for tests and debugging: it never
        holds the key)."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools and request.purpose != "summary":
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if self.max_output_tokens:
            params[self._limit_param] = self.max_output_tokens
        return params

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        reading = _Reading()
        repeats = RepeatFilter(request.continue_from)
        chunks = guarded_stream(
            lambda: self._client.chat.completions.create(
                **self.params(request), extra_headers=self._headers or None
            ),
            self._origin,
            self.timeout_s,
        )
        async with aclosing(chunks):
            async for chunk in chunks:
                text = reading.take(chunk, self._origin)
                if text and (new := repeats.feed(text)):
                    yield new
        if tail := repeats.flush():
            yield tail
        if not reading.chunks:
            raise protocol_error(self._origin, "an empty stream (no chunks)")
        if reading.finish is None:
            raise dropped(self._origin, "ended the stream before the answer was finished")
        if reading.usage:
            yield reading.usage
        if reading.finish == "length":
            raise truncated(self._origin, self.max_output_tokens)
        for call in reading.calls:
            yield call.done()


@dataclass
class _CallParts:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""

    def done(self) -> ToolCall:
        return read_call(self.name, self.arguments, self.id or f"call_{self.index}")


class _Reading:
    """What a stream has said so far: tool-call fragments (by index), finish reason, usage."""

    def __init__(self) -> None:
        self.chunks = 0
        self.calls: list[_CallParts] = []
        self.finish: str | None = None
        self.usage: Usage | None = None

    def take(self, chunk: Any, origin: Origin) -> str:
        """The text in one chunk; records the rest."""
        self.chunks += 1
        try:
            return self._take(chunk)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError):
            raise protocol_error(
                origin, "a chunk without the chat.completion.chunk shape"
            ) from None

    def _take(self, chunk: Any) -> str:
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = Usage(
                input_tokens=int(usage.prompt_tokens or 0),
                output_tokens=int(usage.completion_tokens or 0),
            )
        text = ""
        for choice in chunk.choices or []:
            if getattr(choice, "index", 0) not in (0, None):
                continue  # n > 1 is never asked for
            if choice.finish_reason:
                self.finish = str(choice.finish_reason)
            delta = choice.delta
            if delta is None:
                continue
            if isinstance(delta.content, str):
                text += delta.content
            for part in delta.tool_calls or []:
                self._fragment(part)
        return text

    def _fragment(self, part: Any) -> None:
        index = part.index if isinstance(part.index, int) else len(self.calls)
        fn = part.function
        slot = next((c for c in reversed(self.calls) if c.index == index), None)
        # Some servers send every call whole at index 0: a new id there is a new call.
        if slot is None or (part.id and slot.id and part.id != slot.id):
            slot = _CallParts(index)
            self.calls.append(slot)
        slot.id = part.id or slot.id
        if fn is not None:
            slot.name = fn.name or slot.name
            slot.arguments += fn.arguments or ""


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation in chat-completions form. A summary gets the turns as a transcript
    (no tools are sent); a continuation ends on the seen text as the assistant's own words."""
    system = system_text(request)
    if request.continue_from:
        system = f"{system}\n\n{CONTINUE_INSTRUCTION}" if system else CONTINUE_INSTRUCTION
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    if request.purpose == "summary":
        out.append({"role": "user", "content": summary_transcript(request)})
        return out
    for m in request.messages:
        role = m["role"]
        if role == "assistant" and m.get("tool_calls"):
            out.append(
                {
                    "role": "assistant",
                    "content": m.get("content") or None,
                    "tool_calls": [
                        {
                            "id": wire_call_id(str(c["id"])),
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": json.dumps(c.get("args") or {}, ensure_ascii=False),
                            },
                        }
                        for c in m["tool_calls"]
                    ],
                }
            )
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": wire_call_id(str(m["tool_call_id"])),
                    "content": str(m.get("content") or ""),
                }
            )
        else:
            out.append({"role": role, "content": str(m.get("content") or "")})
    if request.continue_from:
        out.append({"role": "assistant", "content": request.continue_from})
    return out
