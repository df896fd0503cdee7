"""aiohttp-sse or Tether's own SSE writer for the response mechanics: the same events, the
same client, both on one aiohttp server; events per second of each (JSON)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time

import aiohttp
from aiohttp import web
from aiohttp_sse import sse_response

PAYLOAD = json.dumps({"type": "text_delta", "text": "x" * 80, "run_id": "run_0123456789"})


async def tether_style(request: web.Request) -> web.StreamResponse:
    n, batch = int(request.query["n"]), int(request.query.get("batch", "1"))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"retry: 2000\n\n")
    frames: list[bytes] = []
    for i in range(1, n + 1):
        frames.append(f"id: {i}\nevent: run_event\ndata: {PAYLOAD}\n\n".encode())
        if len(frames) >= batch:
            await resp.write(b"".join(frames))
            frames.clear()
    if frames:
        await resp.write(b"".join(frames))
    await resp.write_eof()
    return resp


async def library_style(request: web.Request) -> web.StreamResponse:
    n = int(request.query["n"])
    async with sse_response(request) as sse:
        sse.ping_interval = 15
        for i in range(1, n + 1):
            await sse.send(PAYLOAD, id=str(i), event="run_event")
    return sse


async def _read(session: aiohttp.ClientSession, url: str) -> int:
    chunks: list[bytes] = []
    async with session.get(url) as resp:
        async for chunk in resp.content.iter_any():
            chunks.append(chunk)
    body = b"".join(chunks)
    return body.count(b"\nevent: run_event") + body.count(b"\r\nevent: run_event")


async def main(n: int, rounds: int) -> dict[str, object]:
    app = web.Application()
    app.router.add_get("/tether", tether_style)
    app.router.add_get("/lib", library_style)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    site = web.SockSite(runner, sock)
    await site.start()
    out: dict[str, object] = {"events": n, "rounds": rounds}
    async with aiohttp.ClientSession() as session:
        for name, path in (
            ("tether_batch1", "/tether?batch=1"),
            ("tether_batch64", "/tether?batch=64"),
            ("aiohttp_sse", "/lib?"),
        ):
            best = None
            for _ in range(rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                got = await _read(session, f"http://127.0.0.1:{port}{path}&n={n}")
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                assert got >= n, (name, got)
                best = wall if best is None else min(best, wall)
                cpu_per = cpu / n * 1e6
            out[name] = {"events_per_s": round(n / best), "cpu_us_per_event": round(cpu_per, 2)}
    await runner.cleanup()
    return out


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    print(json.dumps(asyncio.run(main(n, 5))))
