"""`mcp_call`: what a tool call through an MCP server costs over a native tool's, measured in
the load generator's own process on the runtime's own code: a native read tool's `invoke`
against an MCPTool's (engine/mcp/tools.py: the runtime's Connection, the official `mcp` SDK
client, `tools/call` with Tether's key in `_meta`) on a real server (mcp_echo.py, the official
SDK's server side) over stdio and over Streamable HTTP. Sequential calls, after a warm-up;
µs per call (median of batches) and the overhead over native. The engine's other steps of a
tool call (gate, claim, events) are the same for both kinds and not in these figures."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tether_runtime.engine.mcp.effects import derive
from tether_runtime.engine.mcp.sessions import Connection
from tether_runtime.engine.mcp.tools import MCPTool, annotations_of
from tether_sdk import MCPServer, Tool

from tether_bench.stack import free_port

BENCH_DIR = Path(__file__).resolve().parents[1]


class _Ctx:
    """What a tool's invoke reads of its ToolContext in this measurement."""

    idempotency_key = "bench-key"
    _ask = None

    def time_left(self) -> float:
        return 30.0

    async def progress(self, fraction: float, text: str = "") -> None:
        return None


async def _echo(text: str) -> str:
    return text


async def _per_call_us(call: Callable[[], Awaitable[Any]], calls: int, batches: int = 5) -> float:
    for _ in range(max(calls // 10, 5)):  # warm-up
        await call()
    per_batch = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            await call()
        per_batch.append((time.perf_counter() - t0) / calls * 1e6)
    return round(statistics.median(per_batch), 1)


async def _mcp_tool(server: MCPServer) -> tuple[MCPTool, Connection]:
    conn = Connection(server)
    listed = {t.name: t for t in await conn.list_tools(30)}["echo"]
    derived = derive(server, "echo", annotations_of(listed), None, None)
    return MCPTool(server, listed, derived, conn), conn


async def _wait_port(port: int, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("the MCP echo server never listened") from None
            await asyncio.sleep(0.05)


async def mcp_call(params: dict[str, Any]) -> dict[str, Any]:
    calls = int(params.get("calls", 200))
    ctx: Any = _Ctx()
    args = {"text": "hello"}
    native = Tool(_echo, effect="read", name="echo")
    out: dict[str, Any] = {"calls_per_batch": calls}
    out["native_us"] = await _per_call_us(lambda: native.invoke(ctx, args), calls)

    stdio = MCPServer.stdio(
        "bench",
        command=[sys.executable, "-m", "tether_bench.mcp_echo", "stdio"],
        env={"PYTHONPATH": str(BENCH_DIR)},
    )
    tool, conn = await _mcp_tool(stdio)
    try:
        assert (await tool.invoke(ctx, args)).summary == "hello"
        out["stdio_us"] = await _per_call_us(lambda: tool.invoke(ctx, args), calls)
    finally:
        await conn.close()

    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether_bench.mcp_echo", "http", str(port)
    )
    try:
        await _wait_port(port)
        http = MCPServer.http("bench", url=f"http://127.0.0.1:{port}/mcp")
        tool, conn = await _mcp_tool(http)
        try:
            assert (await tool.invoke(ctx, args)).summary == "hello"
            out["http_us"] = await _per_call_us(lambda: tool.invoke(ctx, args), calls)
        finally:
            await conn.close()
    finally:
        proc.kill()
        await proc.wait()
    out["stdio_overhead_us"] = round(out["stdio_us"] - out["native_us"], 1)
    out["http_overhead_us"] = round(out["http_us"] - out["native_us"], 1)
    return out


if __name__ == "__main__":
    import json

    print(
        json.dumps(asyncio.run(mcp_call({"calls": int(sys.argv[1]) if len(sys.argv) > 1 else 50})))
    )
