"""An agent: a name, a description, instructions, a model, tools and limits; optionally its own
tables (migrations), its own resources (lifespan) and demo data (seed)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from tether_sdk._mcp import MCPServer
from tether_sdk._model import Anthropic, Model, OpenAICompatible, Provider
from tether_sdk._tools import Tool

_AGENT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_MIGRATIONS = re.compile(r"^[A-Za-z_][\w.]*:[\w./-]+$")

ConcurrentRuns = Literal["reject", "enqueue", "interrupt"]
CONCURRENT_RUNS_POLICIES: tuple[ConcurrentRuns, ...] = ("reject", "enqueue", "interrupt")


# The pending calls a question becomes (SelectOption, ProvideInput): a tool of that name would be
# taken for a question, and a model could raise one by naming it.
RESERVED_TOOL_NAMES = frozenset({"select_option", "provide_input"})


class AgentDefinitionError(Exception):
    """An agent that Tether refuses to load; the message lists every reason."""


@dataclass(frozen=True)
class Limits:
    max_steps: int = 25
    """Model steps per run; past it the run fails with STEP_LIMIT_EXCEEDED."""
    run_deadline_s: float = 3600.0
    """Execution time per run, not counting time waiting for a person; past it the run fails
    with DEADLINE_EXCEEDED."""
    tool_timeout_s: float = 60.0
    """Per tool call, unless the tool sets its own `timeout_s`."""
    tool_retries: int = 2
    """Extra calls after a TransientError (or a timeout of a read tool)."""
    retry_backoff_s: float = 0.5
    """First wait before a retry; it doubles each time."""
    model_retries: int = 4
    """Extra attempts at a model step after a transient provider error (429, 5xx, timeout,
    dropped stream); backoff doubles from `model_backoff_s` with jitter, at most
    `model_backoff_max_s`, and never shorter than the provider's Retry-After."""
    model_backoff_s: float = 1.0
    model_backoff_max_s: float = 30.0
    context_tokens: int = 8000
    """The token budget of what a step sends: instructions, facts, the conversation's summary,
    recent turns verbatim and the run's own transcript (old tool results are compacted past it)."""
    max_run_tokens: int = 0
    """Input plus output tokens per run; past it the run fails with TOKEN_LIMIT_EXCEEDED.
    0: no limit."""

    def problems(self) -> list[str]:
        out = []
        if self.max_steps < 1:
            out.append("limits.max_steps must be at least 1")
        for label, v in (
            ("run_deadline_s", self.run_deadline_s),
            ("tool_timeout_s", self.tool_timeout_s),
        ):
            if v <= 0:
                out.append(f"limits.{label} must be positive")
        if self.tool_retries < 0 or self.retry_backoff_s < 0:
            out.append("limits.tool_retries and limits.retry_backoff_s cannot be negative")
        if self.model_retries < 0 or self.model_backoff_s < 0 or self.model_backoff_max_s < 0:
            out.append("limits.model_retries and the model backoffs cannot be negative")
        if self.context_tokens < 500:
            out.append("limits.context_tokens must be at least 500")
        if self.max_run_tokens < 0:
            out.append("limits.max_run_tokens cannot be negative (0: no limit)")
        return out


@dataclass(frozen=True)
class Host:
    """What the runtime tells an agent's `lifespan`, `seed` and `reset` about where it runs."""

    database_url: str
    """Tether's database, where `tether migrate` created the agent's own tables."""
    transaction_pooler: bool = False
    """`database_url` goes through a transaction-mode pooler (PgBouncer, TETHER_DB_POOLER): a
    pool on it must not cache prepared statements (asyncpg: `statement_cache_size=0`) nor rely
    on session state (SET, session advisory locks, LISTEN, temporary tables)."""


Lifespan = Callable[[Host], AbstractAsyncContextManager[Any]]


@dataclass(frozen=True)
class Agent:
    name: str
    description: str
    instructions: str
    model: Model | Provider
    tools: Sequence[Tool] = ()
    limits: Limits = field(default_factory=Limits)
    migrations: str | None = None
    """"package:folder" holding NNNN_name.sql files; `tether migrate` applies them after
    Tether's own, once each, in order."""
    lifespan: Lifespan | None = None
    """`lifespan(host)`: an async context manager run once per process; what it yields is
    `ctx.state` in every tool call (a connection pool, an API client), closed at shutdown."""
    seed: Callable[[Any], Awaitable[None]] | None = None
    """Loads demo data (given `ctx.state`); `tether seed-demo` runs it. Must be idempotent."""
    reset: Callable[[Any], Awaitable[None]] | None = None
    """Puts the demo data back as `seed` first made it (given `ctx.state`), undoing what runs
    changed since: `tether seed-demo --reset` runs it (an agent without one is seeded again)."""
    concurrent_runs: ConcurrentRuns = "enqueue"
    """A message to this agent while a run of its conversation is active (queued, running,
    waiting for a person, or itself waiting): "reject" refuses it (RUN_ACTIVE, 409, naming the
    active run), "enqueue" queues its run to start when the active ones end (seeing their
    answers), "interrupt" cancels the active runs (a running one at its next safe point, never
    inside a write tool) and starts it after them."""
    mcp_servers: Sequence[MCPServer] = ()
    """MCP servers whose tools the agent uses beside its own, named `<server>__<tool>`: listed
    when the agent loads, each one's effect derived from its annotations (MCPServer)."""

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def warnings(self) -> list[str]:
        """What loads but deserves a look (`tether agents` and `tether conformance` print it):
        read tools any user may call."""
        return [w for t in self.tools if isinstance(t, Tool) for w in t.warnings()]

    def problems(self) -> list[str]:
        out: list[str] = []
        if not _AGENT_NAME.match(self.name or ""):
            out.append(
                f"agent name {self.name!r}: 1-64 lowercase letters, digits, '_' or '-', "
                "starting with a letter"
            )
        if not isinstance(self.model, OpenAICompatible | Anthropic) and not hasattr(
            self.model, "stream"
        ):
            out.append(f"agent {self.name!r}: model must have stream(request) or be a provider")
        seen: set[str] = set()
        for item in self.tools:
            t = cast(object, item)  # callers may pass anything; say what is wrong
            if not isinstance(t, Tool):
                out.append(f"agent {self.name!r}: {t!r} is not a tool; decorate it with @tool")
                continue
            if t.name in seen:
                out.append(f"agent {self.name!r}: two tools are named {t.name!r}")
            if t.name in RESERVED_TOOL_NAMES:
                out.append(
                    f"agent {self.name!r}: a tool may not be named {t.name!r}: the name is the "
                    "engine's, for a question a step asks a person (SelectOption / ProvideInput)"
                )
            seen.add(t.name)
            out.extend(t.problems())
        out.extend(self.limits.problems())
        servers: set[str] = set()
        for entry in self.mcp_servers:
            server = cast(object, entry)
            if not isinstance(server, MCPServer):
                out.append(f"agent {self.name!r}: {server!r} is not an MCPServer")
                continue
            if server.name in servers:
                out.append(f"agent {self.name!r}: two MCP servers are named {server.name!r}")
            servers.add(server.name)
            out.extend(server.problems())
        if self.concurrent_runs not in CONCURRENT_RUNS_POLICIES:
            out.append(
                f"agent {self.name!r}: concurrent_runs must be one of "
                f"{', '.join(CONCURRENT_RUNS_POLICIES)}, not {self.concurrent_runs!r}"
            )
        if self.migrations is not None and not _MIGRATIONS.match(self.migrations):
            out.append(
                f"agent {self.name!r}: migrations must be 'package:folder', not {self.migrations!r}"
            )
        return out

    def check(self) -> Agent:
        """The agent itself, or AgentDefinitionError listing every problem."""
        problems = self.problems()
        if problems:
            raise AgentDefinitionError(
                f"agent {self.name!r} cannot be loaded:\n" + "".join(f"  - {p}\n" for p in problems)
            )
        return self
