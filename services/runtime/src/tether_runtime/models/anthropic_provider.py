"""The Anthropic Messages API through the official `anthropic` SDK: streamed text, `tool_use`
blocks assembled from their JSON deltas, usage, and every failure as a `ModelError`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
from tether_sdk import Anthropic, ModelRequest, ToolCall, Usage
from tether_sdk._model import Chunk

from tether_runtime.models.continuation import LeadingSpaceTrim, split_prefill
from tether_runtime.models.errors import (
    Origin,
    dropped,
    protocol_error,
    truncated,
)
from tether_runtime.models.guarded import guarded_stream
from tether_runtime.models.keys import Secret
from tether_runtime.models.prompt import summary_transcript, system_text
from tether_runtime.models.tool_calls import read_call, wire_call_id

ANTHROPIC_BASE_URL = "https://api.anthropic.com"

_TRUNCATING = ("max_tokens", "model_context_window_exceeded")


class AnthropicProvider:
    """One agent's Anthropic model: one SDK client for all its steps, no SDK retries (the
    engine retries). A continuation is a prefill of the assistant's answer, so the model goes
    on from the exact character the user saw."""

    provider = "anthropic"
    continues_text = True
    """Honours ModelRequest.continue_from: the engine retries a dropped step from the text shown."""

    def __init__(
        self,
        config: Anthropic,
        *,
        base_url: str,
        api_key: str | Secret,
        agent: str = "",
    ) -> None:
        key = api_key if isinstance(api_key, Secret) else Secret(api_key)
        if not key:
            where = config.api_key_file or config.api_key_env
            raise ValueError(
                f"agent {agent or config.model}: the Anthropic model needs an API key ({where} is empty)"
            )
        self.model = config.model
        # The SDK adds /v1/messages; a base URL copied with /v1 would double it.
        self.base_url = (base_url or ANTHROPIC_BASE_URL).rstrip("/").removesuffix("/v1")
        self.max_output_tokens = config.max_output_tokens
        self.timeout_s = config.timeout_s
        self._origin = Origin("Anthropic", config.model, agent, key)
        self._client = anthropic.AsyncAnthropic(
            base_url=self.base_url,
            api_key=key.reveal(),
            max_retries=0,
            timeout=httpx2.Timeout(config.timeout_s, connect=min(config.timeout_s, 10.0)),
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        await self._client.close()

    def params(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API request for one step (never holds the key)."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_output_tokens,
            "messages": to_anthropic_messages(request),
            "stream": True,
        }
        if system := system_text(request):
            params["system"] = system
        if request.tools and request.purpose != "summary":
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        return params

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        reading = _Reading()
        trim = LeadingSpaceTrim(split_prefill(request.continue_from)[1])
        events = guarded_stream(
            lambda: self._client.messages.create(**self.params(request)),
            self._origin,
            self.timeout_s,
        )
        async with aclosing(events):
            async for event in events:
                text = reading.take(event, self._origin)
                if text and (new := trim.feed(text)):
                    yield new
        if not reading.events:
            raise protocol_error(self._origin, "an empty stream (no events)")
        if not reading.stopped:
            raise dropped(self._origin, "ended the stream before message_stop")
        yield reading.usage()
        if reading.stop_reason in _TRUNCATING:
            raise truncated(self._origin, self.max_output_tokens)
        for block in reading.tool_blocks():
            yield block.done()


@dataclass
class _ToolBlock:
    id: str
    name: str
    start_input: dict[str, Any] = field(default_factory=dict)
    partial_json: str = ""

    def done(self) -> ToolCall:
        raw = self.partial_json
        if not raw and self.start_input:
            raw = json.dumps(self.start_input)
        return read_call(self.name, raw, self.id)


class _Reading:
    """What a stream has said so far, event by event."""

    def __init__(self) -> None:
        self.events = 0
        self.stopped = False
        self.stop_reason: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self._tools: dict[int, _ToolBlock] = {}

    def usage(self) -> Usage:
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)

    def tool_blocks(self) -> list[_ToolBlock]:
        return [self._tools[i] for i in sorted(self._tools)]

    def take(self, event: Any, origin: Origin) -> str:
        self.events += 1
        try:
            return self._take(event)
        except (AttributeError, TypeError, ValueError, KeyError):
            raise protocol_error(origin, f"a malformed {_kind(event)} event") from None

    def _take(self, event: Any) -> str:
        kind = event.type
        if kind == "message_start":
            self._count(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "tool_use":
                start = block.input if isinstance(block.input, dict) else {}
                self._tools[int(event.index)] = _ToolBlock(str(block.id), str(block.name), start)
            elif block.type == "text" and block.text:
                return str(block.text)
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                return str(delta.text)
            if delta.type == "input_json_delta":
                tool = self._tools.get(int(event.index))
                if tool is None:
                    raise ValueError("input_json_delta outside a tool_use block")
                tool.partial_json += str(delta.partial_json or "")
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._count(event.usage)
        elif kind == "message_stop":
            self.stopped = True
        return ""

    def _count(self, usage: Any) -> None:
        """Anthropic reports input once (message_start, sometimes again in message_delta)
        and output cumulatively; cached input counts as input."""
        if usage is None:
            return
        parts = (
            getattr(usage, "input_tokens", None),
            getattr(usage, "cache_creation_input_tokens", None),
            getattr(usage, "cache_read_input_tokens", None),
        )
        if any(p is not None for p in parts):
            self.input_tokens = max(self.input_tokens, sum(int(p or 0) for p in parts))
        output = getattr(usage, "output_tokens", None)
        if output is not None:
            self.output_tokens = max(self.output_tokens, int(output))


def _kind(event: Any) -> str:
    kind = getattr(event, "type", None)
    return kind if isinstance(kind, str) else "unknown"


def to_anthropic_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The conversation as Messages API turns: tool calls become `tool_use` blocks, tool
    results `tool_result` blocks in a user turn, and consecutive turns of one role are merged
    (the API wants user and assistant to alternate, tool results first in their turn)."""
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": list(blocks)})

    if request.purpose == "summary":
        add("user", _text(summary_transcript(request)))
    else:
        for m in request.messages:
            role = m.get("role")
            if role == "assistant":
                blocks = _text(m.get("content"))
                blocks += [
                    {
                        "type": "tool_use",
                        "id": wire_call_id(str(c["id"])),
                        "name": c["name"],
                        "input": c.get("args") or {},
                    }
                    for c in m.get("tool_calls") or []
                ]
                add("assistant", blocks)
            elif role == "tool":
                add("user", [_tool_result(m)])
            else:
                add("user", _text(m.get("content")))
    for turn in turns:
        if turn["role"] == "user":
            # Stable: tool results first, then the user's words, each in their order.
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": _text("(the conversation continues)")})
    prefill = split_prefill(request.continue_from)[0]
    if prefill:
        add("assistant", _text(prefill))
    return turns


def _text(content: object) -> list[dict[str, Any]]:
    # The API refuses empty text blocks.
    text = str(content or "")
    return [{"type": "text", "text": text}] if text.strip() else []


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    content = str(message.get("content") or "")
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": wire_call_id(str(message["tool_call_id"])),
        "content": content,
    }
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("ok") is False:
        block["is_error"] = True
    return block
