"""A fake OpenAI chat-completions server (POST /v1/chat/completions, also /chat/completions):
`data: {chat.completion.chunk}` lines, tool-call arguments split across chunks, the usage chunk
when `stream_options.include_usage`, then `data: [DONE]`; errors as OpenAI's JSON error body."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from tether_testkit.fake_llm import FakeLLM, Reply, Sender, frame, random_id, split

_STOP = {"end": "stop", "tool": "tool_calls", "length": "length"}

_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: (
        "invalid_request_error",
        "model_not_found",
        "The model does not exist or you do not have access to it.",
    ),
    413: ("invalid_request_error", None, "Request too large."),
    422: ("invalid_request_error", None, "Unprocessable request."),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again in 2s.",
    ),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


class FakeOpenAI(FakeLLM):
    """`base_url` ends in /v1, as the `openai` SDK expects."""

    paths = ("/v1/chat/completions", "/chat/completions")

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def wrong_key_message(self, shown: str) -> str:
        return (
            f"Incorrect API key provided: {shown}. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )

    def error(
        self, status: int, kind: str, message: str, headers: Mapping[str, str]
    ) -> web.Response:
        default_kind, code, default_message = _ERRORS.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None, "Error.")
        )
        if status == 401 and message:
            code = "invalid_api_key"
        body = {
            "error": {
                "message": message or default_message,
                "type": kind or default_kind,
                "param": None,
                "code": code,
            }
        }
        return web.json_response(
            body, status=status, headers={"x-request-id": random_id("req_"), **headers}
        )

    def stream_error(self, reply: Reply) -> bytes:
        error = {
            "message": reply.error_message
            or "The server had an error while processing your request.",
            "type": reply.error_type or "server_error",
            "param": None,
            "code": None,
        }
        return frame({"error": error}, None)

    def validate(self, body: dict[str, Any]) -> str:
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "you must provide a model parameter"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "[] is too short - 'messages'"
        if "tools" in body and not body["tools"]:
            return "[] is too short - 'tools'"
        asked: set[str] = set()
        for i, m in enumerate(messages):
            role = m.get("role")
            if role not in ("system", "developer", "user", "assistant", "tool"):
                return f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool'."
            if role == "assistant":
                for c in m.get("tool_calls") or []:
                    if len(c.get("id", "")) > 40:
                        return f"Invalid 'messages[{i}].tool_calls[0].id': string too long."
                    asked.add(c.get("id"))
                    json.loads(c["function"]["arguments"])
            if role == "tool" and m.get("tool_call_id") not in asked:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
        return ""

    async def stream(self, out: Sender, reply: Reply, body: dict[str, Any]) -> None:
        cid = random_id("chatcmpl-", 29)
        created = int(time.time())
        model = str(body.get("model"))
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            c: dict[str, Any] = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if with_usage:
                c["usage"] = None
            return c

        pieces = reply.pieces()
        first: dict[str, Any] = {
            "role": "assistant",
            "content": "" if pieces else None,
            "refusal": None,
        }
        await out.event(chunk(first))
        for piece in pieces:
            await out.event(chunk({"content": piece}))
        for index, call in enumerate(reply.calls):
            head = {
                "index": index,
                "id": call.id or random_id("call_"),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            await out.event(chunk({"tool_calls": [head]}))
            for part in split(call.arguments(), call.pieces):
                await out.event(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
                )
        stop = reply.stop_reason()
        await out.event(chunk({}, _STOP.get(stop, stop)))
        if with_usage:
            sent, made = reply.tokens(body)
            usage = {"prompt_tokens": sent, "completion_tokens": made, "total_tokens": sent + made}
            await out.event(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": "fp_fake",
                    "choices": [],
                    "usage": usage,
                }
            )
        await out.event("[DONE]")
