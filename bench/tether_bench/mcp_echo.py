"""The MCP server of the `mcp_call` scenario (mcp_overhead.py): one read-only tool, `echo`,
written with the official SDK's server side. `python -m tether_bench.mcp_echo stdio` or
`... http PORT` (Streamable HTTP at /mcp)."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("bench-echo")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(
            server.streamable_http_app(),
            host="127.0.0.1",
            port=int(sys.argv[2]),
            log_level="warning",
        )
