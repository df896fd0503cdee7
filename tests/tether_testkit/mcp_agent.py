"""Test agents whose tools are MCP servers' (issue 31), driven by a ScriptedModel:

- `gitops`: the reference `mcp-server-git` from PyPI, unmodified, over stdio, on the repository
  MCP_GIT_REPO;
- `fileops`: the reference `@modelcontextprotocol/server-filesystem` from npm (the repository's
  node_modules), unmodified, over stdio, on the directory MCP_FS_ROOT;
- `webops`: the Streamable HTTP server at MCP_HTTP_URL (tests/tether_testkit/mcp_http_server.py),
  its Authorization header from MCP_HTTP_AUTH (headers_from_env), with a short timeout.

The user's message says what to call: `call <tool> <JSON arguments>`; once the result is back,
the model answers `<tool> ended: <outcome>: <summary>`.

Load with TETHER_AGENTS=tether_testkit.mcp_agent:gitops (tests/ on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tether_sdk import Agent, Limits, MCPOverride, MCPServer, ModelRequest, ScriptedModel, ToolCall


def decide(req: ModelRequest) -> str | ToolCall:
    results = req.results()
    if results:
        r = results[-1]
        return f"{r.tool} ended: {r.outcome}: {r.summary}"
    _, tool, args = req.last_user_text().split(" ", 2)
    return ToolCall(tool, json.loads(args))


gitops = Agent(
    name="gitops",
    description="Test agent: the reference git MCP server over stdio.",
    instructions="Do what you are asked with git.",
    model=ScriptedModel(decide),
    mcp_servers=[
        MCPServer.stdio(
            "git",
            command=[
                sys.executable,
                "-m",
                "mcp_server_git",
                "--repository",
                os.environ.get("MCP_GIT_REPO", "."),
            ],
            # git_reset is destructive: an operator may switch a tool off altogether.
            tools={"git_reset": MCPOverride(deny=True)},
        )
    ],
    limits=Limits(max_steps=5, tool_retries=1, retry_backoff_s=0.05),
)

# The package's entry point as npm installed it (package.json's devDependencies, `npm ci`).
FS_SERVER = (
    Path(__file__).resolve().parents[2]
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-filesystem"
    / "dist"
    / "index.js"
)

fileops = Agent(
    name="fileops",
    description="Test agent: the reference filesystem MCP server from npm over stdio.",
    instructions="Do what you are asked with files.",
    model=ScriptedModel(decide),
    mcp_servers=[
        MCPServer.stdio(
            "fs",
            command=[
                shutil.which("node") or "node",
                str(FS_SERVER),
                os.environ.get("MCP_FS_ROOT", "."),
            ],
        )
    ],
    limits=Limits(max_steps=5, tool_retries=1, retry_backoff_s=0.05),
)

webops = Agent(
    name="webops",
    description="Test agent: a Streamable HTTP MCP server written with the official SDK.",
    instructions="Do what you are asked.",
    model=ScriptedModel(decide),
    mcp_servers=[
        MCPServer.http(
            "web",
            url=os.environ.get("MCP_HTTP_URL", "http://127.0.0.1:1/mcp"),
            headers_from_env={"Authorization": "MCP_HTTP_AUTH"},
            timeout_s=float(os.environ.get("MCP_HTTP_TIMEOUT_S") or 3),
            elicitation_timeout_s=float(os.environ.get("MCP_HTTP_ELICIT_S") or 60),
            tools={
                # The agent says what the server does not: this tool honours the key.
                "keyed_send": MCPOverride(
                    idempotent=True, scope="{to}", examples=[{"to": "carol"}]
                ),
            },
        )
    ],
    limits=Limits(max_steps=5, tool_retries=1, retry_backoff_s=0.05),
)


def http_effects(_state: Any, key: str) -> int:
    """`tether conformance --effects`: the effects the HTTP server logged for one key."""
    try:
        lines = Path(os.environ["MCP_HTTP_LOG"]).read_text().splitlines()
    except FileNotFoundError:
        return 0
    rows = [json.loads(line) for line in lines if line.strip()]
    return sum(1 for r in rows if r["kind"] == "effect" and r["key"] == key)
