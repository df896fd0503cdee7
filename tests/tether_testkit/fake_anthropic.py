"""A fake Anthropic Messages API (POST /v1/messages): the documented event sequence
(message_start, content_block_start/delta/stop with text_delta and input_json_delta, ping,
message_delta with stop_reason and usage, message_stop), the 400s the real API gives for
malformed conversations, and errors as Anthropic's JSON error body."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tether_testkit.fake_llm import FakeLLM, Reply, Sender, frame, random_id, split

_STOP = {"end": "end_turn", "tool": "tool_use", "length": "max_tokens"}

_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: (
        "permission_error",
        "Your API key does not have permission to use the specified resource.",
    ),
    404: ("not_found_error", "model: not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}

_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


class FakeAnthropic(FakeLLM):
    """`base_url` is the origin: the `anthropic` SDK adds /v1/messages itself. The key may
    come as `x-api-key` or `Authorization: Bearer`."""

    paths = ("/v1/messages",)
    garbage = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0,\n\n'

    def sent_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-api-key") or super().sent_key(headers)

    def wrong_key_message(self, shown: str) -> str:
        return f"invalid x-api-key {shown}" if self.echo_key_in_errors else "invalid x-api-key"

    def error(
        self, status: int, kind: str, message: str, headers: Mapping[str, str]
    ) -> web.Response:
        default_kind, default_message = _ERRORS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", "Error.")
        )
        request_id = random_id("req_011")
        body = {
            "type": "error",
            "error": {"type": kind or default_kind, "message": message or default_message},
            "request_id": request_id,
        }
        return web.json_response(body, status=status, headers={"request-id": request_id, **headers})

    def stream_error(self, reply: Reply) -> bytes:
        error = {
            "type": reply.error_type or "overloaded_error",
            "message": reply.error_message or "Overloaded",
        }
        return frame({"type": "error", "error": error}, "error")

    def validate(self, body: dict[str, Any]) -> str:
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model: Field required"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        uses_tools = False
        previous_uses: set[str] = set()
        for i, m in enumerate(messages):
            role = m.get("role")
            if role not in ("user", "assistant"):
                return f"messages.{i}.role: Input should be 'user' or 'assistant'"
            content = m.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            uses: set[str] = set()
            for j, b in enumerate(blocks):
                kind = b.get("type")
                if kind == "text" and not b.get("text"):
                    return "messages: text content blocks must be non-empty"
                if kind == "tool_use":
                    uses_tools = True
                    if role != "assistant" or not _TOOL_ID.match(str(b.get("id"))):
                        return f"messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                    uses.add(b["id"])
                if kind == "tool_result":
                    uses_tools = True
                    if b.get("tool_use_id") not in previous_uses:
                        return (
                            f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                            "`tool_result` blocks. Each `tool_result` block must have a "
                            "corresponding `tool_use` block in the previous message."
                        )
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if previous_uses - answered:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    "immediately after"
                )
            previous_uses = uses
        last = messages[-1]
        if last.get("role") == "assistant":
            content = last.get("content")
            tail = (
                content
                if isinstance(content, str)
                else (content[-1].get("text", "x") if content else "x")
            )
            if tail != tail.rstrip():
                return "messages: final assistant content cannot end with trailing whitespace"
        if uses_tools and not body.get("tools"):
            return "Requests which include `tool_use` or `tool_result` blocks must define tools."
        return ""

    async def stream(self, out: Sender, reply: Reply, body: dict[str, Any]) -> None:
        sent, made = reply.tokens(body)
        message: dict[str, Any] = {
            "id": random_id("msg_01"),
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body.get("model"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": sent,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
        }
        await out.event({"type": "message_start", "message": message}, "message_start")
        index = 0
        pieces = reply.pieces()
        if pieces:
            await out.event(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            )
            await out.event({"type": "ping"}, "ping")
            for piece in pieces:
                delta = {"type": "text_delta", "text": piece}
                await out.event(
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                    "content_block_delta",
                )
            await out.event({"type": "content_block_stop", "index": 0}, "content_block_stop")
            index = 1
        for call in reply.calls:
            block = {
                "type": "tool_use",
                "id": call.id or random_id("toolu_01", 22),
                "name": call.name,
                "input": {},
            }
            await out.event(
                {"type": "content_block_start", "index": index, "content_block": block},
                "content_block_start",
            )
            for part in ["", *split(call.arguments(), call.pieces)]:
                delta = {"type": "input_json_delta", "partial_json": part}
                await out.event(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            await out.event({"type": "content_block_stop", "index": index}, "content_block_stop")
            index += 1
        stop = reply.stop_reason()
        await out.event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _STOP.get(stop, stop), "stop_sequence": None},
                "usage": {"output_tokens": made},
            },
            "message_delta",
        )
        await out.event({"type": "message_stop"}, "message_stop")
