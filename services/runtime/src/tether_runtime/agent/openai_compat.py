"""An OpenAI-compatible streaming chat-completions adapter with tool calling: works with any server
that speaks the protocol (vLLM, llama.cpp, Ollama, hosted APIs)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from tether_sdk import ModelRequest, ToolCall
from tether_sdk._model import Chunk


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    system = "\n\n".join(p for p in (request.instructions, request.context) if p)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in request.messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append(
                {
                    "role": "assistant",
                    "content": m.get("content") or None,
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                        }
                        for c in m["tool_calls"]
                    ],
                }
            )
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


class OpenAICompatModel:
    def __init__(self, base_url: str, api_key: str, model: str, timeout_s: float = 120) -> None:
        if not base_url:
            raise ValueError("TETHER_OPENAI_BASE_URL is required when TETHER_MODEL=openai")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.model = model
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_read=60)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        body = {
            "model": self.model,
            "stream": True,
            "messages": to_openai_messages(request),
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ],
        }
        calls: dict[int, dict[str, str]] = {}
        async with (
            aiohttp.ClientSession(timeout=self.timeout) as session,
            session.post(self.url, json=body, headers=self._headers) as resp,
        ):
            if resp.status != 200:
                # The body may echo the request; never the key. Keep only the status.
                raise RuntimeError(f"model server answered HTTP {resp.status}")
            async for raw in resp.content:
                line = raw.decode("utf-8").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                choice = (json.loads(data).get("choices") or [{}])[0]
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    yield str(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(
                        int(tc.get("index", 0)), {"id": "", "name": "", "arguments": ""}
                    )
                    slot["id"] = tc.get("id") or slot["id"]
                    fn = tc.get("function") or {}
                    slot["name"] = fn.get("name") or slot["name"]
                    slot["arguments"] += fn.get("arguments") or ""
        for index in sorted(calls):
            c = calls[index]
            args = json.loads(c["arguments"] or "{}")
            yield ToolCall(c["name"], args, c["id"] or f"call_{index}")
