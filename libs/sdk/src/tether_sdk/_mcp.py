"""MCP servers as an agent's tools: where a server is (a command over stdio, or a Streamable HTTP
URL) and what the agent, or its operator, says of its tools over their annotations.

    git = MCPServer.stdio("git", command=["uvx", "mcp-server-git", "--repository", "/srv/repo"],
                          tools={"git_commit": MCPOverride(scope="{repo_path}")})
    Agent(..., mcp_servers=[git])

The runtime connects to each server when the agent loads (one session per server per process),
lists its tools and offers them to the model as `<server>__<tool>`. Each tool's effect comes from
its annotations with safe defaults: `readOnlyHint: true` is a read; every other tool, a server that
declares no annotations included, is a write (a grant, then a person's confirmation), called again
after a crash only when `idempotentHint: true` (else `outcome_unknown`: a person decides). An
`MCPOverride` has the last word. The SDK only declares; it imports no MCP library."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether_sdk._approval import Approval
from tether_sdk._tools import _ACTION, EFFECTS, Risk, Scope

MCPTransport = Literal["stdio", "http"]
_SERVER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
RISKS = ("low", "medium", "high")

IDEMPOTENCY_META_KEY = "io.tether/idempotency-key"
"""The `_meta` entry of every `tools/call` request that carries Tether's idempotency key: stable
for one call across retries, crashes and pods. A server that honours it dedupes a repeated call."""


@dataclass(frozen=True)
class MCPOverride:
    """What the agent (or an operator's file, TETHER_MCP_OVERRIDES) says of one MCP tool, over
    its annotations. Each field left None keeps what the annotations give.

    - `effect`: "read" or "write".
    - `action`: the grant a user must hold ('noun.verb'); a write tool's default is
      `mcp.<server>` (on the scope below), a read tool's none (every user may call it).
    - `scope`: a template over the arguments ("{repo_path}") or a function of them; default: the
      tool's MCP name.
    - `risk`: the card's risk; default "high" unless `destructiveHint: false` ("medium").
    - `approval`: the write tool's approval policy (Approval(...)).
    - `idempotent`: the server honours the idempotency key or the tool is idempotent, so after a
      crash inside the call the engine calls it again with the same arguments and key.
    - `deny`: never offered to the model nor callable.
    - `timeout_s`: this tool's timeout (else the server's, else the agent's limits).
    - `summary`: how a person sees the arguments (template or function); default every k=v.
    - `examples`: argument sets `tether conformance` drives the tool with (else the tool's
      inputSchema gives them: its `examples`, or each property's example or default)."""

    effect: Literal["read", "write"] | None = None
    action: str | None = None
    scope: Scope | None = None
    risk: Risk | None = None
    approval: Approval | None = None
    idempotent: bool | None = None
    deny: bool = False
    timeout_s: float | None = None
    summary: Scope | None = None
    examples: Sequence[Mapping[str, Any]] | None = None

    def problems(self, where: str) -> list[str]:
        # Read as plain objects: a config file (TETHER_MCP_OVERRIDES) may hold anything.
        approval: object = self.approval
        idempotent: object = self.idempotent
        deny: object = self.deny
        timeout_s: object = self.timeout_s
        scope: object = self.scope
        examples: object = self.examples
        out = []
        if self.effect is not None and self.effect not in EFFECTS:
            out.append(f"{where}: effect must be 'read' or 'write', not {self.effect!r}")
        if self.action is not None and self.action and not _ACTION.match(self.action):
            out.append(f"{where}: action must look like 'noun.verb' (got {self.action!r})")
        if self.risk is not None and self.risk not in RISKS:
            out.append(f"{where}: risk must be one of {', '.join(RISKS)}, not {self.risk!r}")
        if approval is not None and type(approval) is not Approval:
            out.append(f"{where}: approval must be an Approval(...)")
        elif isinstance(approval, Approval):
            out.extend(approval.problems(where))
        if idempotent is not None and not isinstance(idempotent, bool):
            out.append(f"{where}: idempotent must be True or False")
        if not isinstance(deny, bool):
            out.append(f"{where}: deny must be True or False")
        if timeout_s is not None and not (
            isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool) and timeout_s > 0
        ):
            out.append(f"{where}: timeout_s must be a positive number")
        if scope is not None and not (isinstance(scope, str) or callable(scope)):
            out.append(f"{where}: scope must be a template string or a function of the arguments")
        if examples is not None and not (
            isinstance(examples, list | tuple) and all(isinstance(e, Mapping) for e in examples)
        ):
            out.append(f"{where}: examples must be a list of argument objects")
        return out


@dataclass(frozen=True)
class MCPServer:
    """One MCP server an agent uses. Build it with `MCPServer.stdio(...)` or
    `MCPServer.http(...)`. Its tools are named `<name>__<tool>` for the model."""

    name: str
    transport: MCPTransport
    command: tuple[str, ...] = ()
    """stdio: the program and its arguments; started with the runtime, stopped with it."""
    env: Mapping[str, str] = field(default_factory=dict)
    """stdio: variables for the server's process, over a minimal inherited environment (PATH,
    HOME, ...: never the runtime's own secrets)."""
    env_from: Mapping[str, str] = field(default_factory=dict)
    """stdio: the server's variable -> the runtime's variable it is copied from (a token the
    operator gives the runtime; its value is never logged)."""
    cwd: str | None = None
    url: str = ""
    """http: the server's Streamable HTTP endpoint."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """http: headers sent as written (nothing secret here: it is code)."""
    headers_from_env: Mapping[str, str] = field(default_factory=dict)
    """http: header -> the runtime's variable holding its value (e.g. Authorization)."""
    headers_file: str | None = None
    """http: a file of `Header: value` lines (a mounted secret), read at each connection."""
    tools: Mapping[str, MCPOverride] = field(default_factory=dict)
    """The server's tool (by its MCP name) -> what the agent says of it over its annotations."""
    timeout_s: float | None = None
    """Each call's timeout (a tool's override wins; else the agent's `Limits.tool_timeout_s`)."""
    connect_timeout_s: float = 30.0
    """How long the runtime waits for the server to answer when it connects."""
    elicitation_timeout_s: float = 300.0
    """How long a call waits for a person to answer the server's elicitation (a provide_input
    card; at most the interrupt TTL); the server is then told `cancel`. The wait does not count
    against the call's timeout; the runtime's worker slot stays taken meanwhile."""

    @classmethod
    def stdio(
        cls,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        env_from: Mapping[str, str] | None = None,
        cwd: str | None = None,
        tools: Mapping[str, MCPOverride] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 30.0,
        elicitation_timeout_s: float = 300.0,
    ) -> MCPServer:
        return cls(
            name=name,
            transport="stdio",
            command=tuple(command),
            env=dict(env or {}),
            env_from=dict(env_from or {}),
            cwd=cwd,
            tools=dict(tools or {}),
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            elicitation_timeout_s=elicitation_timeout_s,
        )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        headers_from_env: Mapping[str, str] | None = None,
        headers_file: str | None = None,
        tools: Mapping[str, MCPOverride] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float = 30.0,
        elicitation_timeout_s: float = 300.0,
    ) -> MCPServer:
        return cls(
            name=name,
            transport="http",
            url=url,
            headers=dict(headers or {}),
            headers_from_env=dict(headers_from_env or {}),
            headers_file=headers_file,
            tools=dict(tools or {}),
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            elicitation_timeout_s=elicitation_timeout_s,
        )

    @property
    def default_action(self) -> str:
        """The grant a user holds to call this server's write tools, unless overridden."""
        return "mcp." + self.name

    def problems(self) -> list[str]:
        where = f"MCP server {self.name!r}"
        out = []
        if not isinstance(self.name, str) or not _SERVER_NAME.match(self.name):
            out.append(
                f"{where}: a name is 1-24 lowercase letters, digits or '-', starting with a letter "
                "(its tools are offered as <name>__<tool>)"
            )
        transport: object = self.transport
        if transport == "stdio":
            if not self.command or not all(isinstance(c, str) and c for c in self.command):
                out.append(f"{where}: stdio needs command=[program, *arguments]")
            if self.url or self.headers or self.headers_from_env or self.headers_file:
                out.append(f"{where}: url and headers are for an http server")
            for k in (*self.env, *self.env_from, *self.env_from.values()):
                if not _ENV_NAME.match(k):
                    out.append(f"{where}: {k!r} is not an environment variable name")
        elif transport == "http":
            if not self.url.startswith(("http://", "https://")):
                out.append(f"{where}: http needs url='http(s)://...'")
            if self.command or self.env or self.env_from or self.cwd:
                out.append(f"{where}: command, env and cwd are for a stdio server")
            for h in (*self.headers, *self.headers_from_env):
                if not _HEADER_NAME.match(h):
                    out.append(f"{where}: {h!r} is not a header name")
            for v in self.headers_from_env.values():
                if not _ENV_NAME.match(v):
                    out.append(f"{where}: {v!r} is not an environment variable name")
        else:
            out.append(f"{where}: transport must be 'stdio' or 'http', not {transport!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            out.append(f"{where}: timeout_s must be positive")
        if not self.connect_timeout_s > 0:
            out.append(f"{where}: connect_timeout_s must be positive")
        if not self.elicitation_timeout_s > 0:
            out.append(f"{where}: elicitation_timeout_s must be positive")
        for tool_name, item in self.tools.items():
            override: object = item
            if not isinstance(override, MCPOverride):
                out.append(f"{where}: tools[{tool_name!r}] must be an MCPOverride(...)")
                continue
            out.extend(override.problems(f"{where}, tool {tool_name!r}"))
        return out
