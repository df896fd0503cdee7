"""An agent's MCP servers in this process: connected when the agent loads (a server that cannot be
reached then stops the load, with its reason), their tools listed, derived (effects.py) and
added to the agent beside its own; listed again when a server says its tools changed; closed
with the process."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tether_sdk import Agent, Approval, MCPOverride, MCPServer, Tool

from tether_runtime.engine.loaded_agent import AgentLoadError, LoadedAgent
from tether_runtime.engine.mcp.effects import derive
from tether_runtime.engine.mcp.sessions import Connection, Unavailable
from tether_runtime.engine.mcp.tools import MCPTool, annotations_of

log = logging.getLogger(__name__)

OperatorOverrides = dict[str, dict[str, dict[str, MCPOverride]]]
"""agent -> server -> the tool's MCP name -> the operator's override"""

_FIELDS = {
    "effect",
    "action",
    "scope",
    "risk",
    "approval",
    "idempotent",
    "deny",
    "timeout_s",
    "summary",
    "examples",
}


def load_overrides(path: str) -> OperatorOverrides:
    """TETHER_MCP_OVERRIDES: {"agent": {"server": {"tool": {field: value}}}}; AgentLoadError
    naming what is wrong (a file an operator owns must not be half applied)."""
    if not path:
        return {}
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise AgentLoadError(f"TETHER_MCP_OVERRIDES={path}: cannot be read: {err}") from None
    out: OperatorOverrides = {}
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise AgentLoadError(f"TETHER_MCP_OVERRIDES={path}: must be a JSON object")
    for agent, servers in raw.items():
        for server, tools in (servers or {}).items() if isinstance(servers, dict) else ():
            for tool, fields in (tools or {}).items() if isinstance(tools, dict) else ():
                where = f"TETHER_MCP_OVERRIDES {agent}/{server}/{tool}"
                if not isinstance(fields, dict) or set(fields) - _FIELDS:
                    problems.append(f"{where}: fields are {', '.join(sorted(_FIELDS))}")
                    continue
                values: dict[str, Any] = dict(fields)
                if isinstance(values.get("approval"), dict):
                    values["approval"] = Approval(**values["approval"])
                override = MCPOverride(**values)
                found = override.problems(where)
                if found:
                    problems.extend(found)
                    continue
                out.setdefault(agent, {}).setdefault(server, {})[tool] = override
    if problems:
        raise AgentLoadError("\n".join(problems))
    return out


class MCPHub:
    def __init__(
        self,
        overrides: OperatorOverrides | None = None,
        on_tools: Callable[[LoadedAgent], None] | None = None,
    ) -> None:
        self.overrides = overrides or {}
        self.on_tools = on_tools
        """Told each time an agent's tool list is (re)built."""
        self.connections: dict[tuple[str, str], Connection] = {}
        self._native: dict[str, Agent] = {}
        self._listed: dict[tuple[str, str], list[Tool]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def attach(self, loaded: LoadedAgent) -> None:
        """Connect the agent's servers, list their tools and add them to the agent."""
        agent = loaded.agent
        if not agent.mcp_servers:
            return
        self._native[agent.name] = agent
        for server in agent.mcp_servers:
            conn = Connection(server, on_tools_changed=self._on_changed(loaded, server))
            self.connections[(agent.name, server.name)] = conn
            try:
                self._listed[(agent.name, server.name)] = await self._tools(agent, server, conn)
            except Unavailable as err:
                raise AgentLoadError(f"agent {agent.name!r}: {err}") from None
        self._rebuild(loaded)

    async def _tools(self, agent: Agent, server: MCPServer, conn: Connection) -> list[Tool]:
        listed = await conn.list_tools(server.connect_timeout_s)
        operator = self.overrides.get(agent.name, {}).get(server.name, {})
        names = {t.name for t in listed}
        for name in (*server.tools, *operator):
            if name not in names:
                log.warning(
                    "agent %r: MCP server %r lists no tool %r, which an override names",
                    agent.name,
                    server.name,
                    name,
                )
        out: list[Tool] = []
        for t in listed:
            derived = derive(
                server, t.name, annotations_of(t), server.tools.get(t.name), operator.get(t.name)
            )
            if derived.deny:
                log.info("agent %r: MCP tool %s/%s denied", agent.name, server.name, t.name)
                continue
            tool = MCPTool(server, t, derived, conn)
            problems = tool.problems()
            if problems:
                # The server's fault, not the agent's: its other tools stay usable.
                log.warning("agent %r: MCP tool left out: %s", agent.name, "; ".join(problems))
                continue
            out.append(tool)
        return out

    def _rebuild(self, loaded: LoadedAgent) -> None:
        agent = self._native[loaded.name]
        tools: list[Tool] = list(agent.tools)
        seen = {t.name: "the agent's own tool" for t in tools}
        for server in agent.mcp_servers:
            for t in self._listed.get((agent.name, server.name), []):
                if t.name in seen:
                    raise AgentLoadError(
                        f"agent {agent.name!r}: MCP tool {t.name!r} of server {server.name!r} "
                        f"has the name of {seen[t.name]}"
                    )
                seen[t.name] = f"a tool of MCP server {server.name!r}"
                tools.append(t)
        loaded.agent = replace(agent, tools=tuple(tools))
        loaded.cache.clear()  # what was derived from the tools (the context budget)
        if self.on_tools is not None:
            self.on_tools(loaded)

    def _on_changed(self, loaded: LoadedAgent, server: MCPServer) -> Any:
        def changed() -> None:
            task = asyncio.get_running_loop().create_task(self._relist(loaded, server))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return changed

    async def _relist(self, loaded: LoadedAgent, server: MCPServer) -> None:
        agent = self._native[loaded.name]
        key = (agent.name, server.name)
        try:
            self._listed[key] = await self._tools(agent, server, self.connections[key])
            self._rebuild(loaded)
        except (Unavailable, AgentLoadError, TimeoutError) as err:
            log.warning("MCP server %r: its tools could not be listed again: %s", server.name, err)
            return
        log.info("agent %r: MCP server %r's tools listed again", agent.name, server.name)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in self.connections.values():
            try:
                await conn.close()
            except Exception as err:  # noqa: BLE001 - close the others anyway
                log.warning("MCP server %r did not close cleanly: %s", conn.server.name, err)


def tool_origins(agent: Agent) -> Mapping[str, str]:
    """Each MCP tool's origin (where it and its effect came from), by its name."""
    return {t.name: t.origin for t in agent.tools if isinstance(t, MCPTool)}
