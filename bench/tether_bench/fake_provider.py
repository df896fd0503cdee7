"""A streaming OpenAI chat-completions server for the provider benchmark, as a process of its
own: `python -m tether_bench.fake_provider PORT`. Any request whose last user message says
"stream N deltas" gets N `chat.completion.chunk` deltas ("t0 ", "t1 ", ...) as fast as the socket
takes them, then a `stop` chunk, a usage chunk and `[DONE]` ("stream N deltas every K ms": one delta at a
time, K ms apart, for a stream a client can leave in the middle): the provider side costs next to
nothing, so what the benchmark measures is Tether's own per-token work."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

from aiohttp import web

_ASK = re.compile(r"stream (\d+) deltas")
_PACE = re.compile(r"every (\d+) ms")


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    asked = [m for m in body["messages"] if m["role"] == "user"]
    match = _ASK.search(str(asked[-1]["content"]) if asked else "")
    n = int(match.group(1)) if match else 1
    pace = _PACE.search(str(asked[-1]["content"]) if asked else "")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_chunk({"role": "assistant", "content": ""}))
    batch = []
    for i in range(n):
        batch.append(_chunk({"content": f"t{i} "}))
        if pace:  # "... every K ms": one delta at a time, paced (a stream to disconnect from)
            await resp.write(b"".join(batch))
            batch = []
            await asyncio.sleep(int(pace.group(1)) / 1000)
        elif len(batch) == 64:
            await resp.write(b"".join(batch))
            batch = []
    batch.append(_chunk({}, "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": n + 10}
    final = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench-model",
        "choices": [],
        "usage": usage,
    }
    batch.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    batch.append(b"data: [DONE]\n\n")
    await resp.write(b"".join(batch))
    await resp.write_eof()
    return resp


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
