"""The agents this process runs, loaded from configuration (DESIGN section 10): TETHER_AGENTS
(`module:attribute`, comma-separated) and the `tether.agents` entry-point group. The engine knows
an agent only through the public SDK; it imports none by name."""

from __future__ import annotations

import importlib
import json
import logging
from contextlib import AsyncExitStack
from importlib import metadata
from typing import TYPE_CHECKING, Any

from tether_common.config import Settings
from tether_common.errors import AgentNotFound
from tether_sdk import Agent, AgentDefinitionError, Host

from tether_runtime.domain.views import AgentToolView, AgentView
from tether_runtime.engine.driven import is_driven
from tether_runtime.engine.loaded_agent import AgentLoadError, LoadedAgent
from tether_runtime.engine.mcp.hub import MCPHub, OperatorOverrides, load_overrides, tool_origins
from tether_runtime.engine.model_choice import ModelConfigError, make_model

if TYPE_CHECKING:
    from tether_runtime.engine.conformance import Plan

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "tether.agents"


def _import(spec: str) -> object:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentLoadError(f"{spec!r} is not 'module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - any import failure is reported with its cause
        raise AgentLoadError(f"cannot import {module_name!r}: {err}") from err
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AgentLoadError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _graphs() -> Any:
    """tether_langgraph, imported only when configuration names a graph (the engine imports no
    agent framework otherwise)."""
    try:
        return importlib.import_module("tether_langgraph")
    except ImportError as err:
        raise AgentLoadError(f"loading a LangGraph graph needs tether-langgraph: {err}") from err


def _configured(spec: str) -> list[tuple[object, str]]:
    """What one TETHER_AGENTS entry names: `module:attribute` (an agent, or a LangGraph graph
    wrapped into a GraphAgent named after the attribute), or a `langgraph.json` (its graphs)."""
    source = f"TETHER_AGENTS={spec}"
    if spec.endswith(".json"):
        try:
            return list(_graphs().agents_from_config(spec))
        except ValueError as err:  # tether_langgraph's GraphConfigError
            raise AgentLoadError(str(err)) from err
    obj = _import(spec)
    if not isinstance(obj, Agent) and type(obj).__module__.startswith("langgraph."):
        graphs = _graphs()
        if graphs.is_graph(obj):
            name = spec.rpartition(":")[2].rpartition(".")[2]
            return [(graphs.graph_agent(obj, name, spec), source)]
    return [(obj, source)]


def discover(settings: Settings) -> list[tuple[Agent, str]]:
    """Every configured agent (TETHER_AGENTS, then the entry points), checked; AgentLoadError on
    the first that is wrong."""
    found: list[tuple[object, str]] = []
    for spec in settings.agents:
        found.extend(_configured(spec))
    if settings.agent_entry_points:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
            except Exception as err:  # noqa: BLE001
                raise AgentLoadError(f"entry point {ep.name} = {ep.value}: {err}") from err
            found.append((obj, f"entry point {ep.name} = {ep.value}"))
    out: list[tuple[Agent, str]] = []
    names: dict[str, str] = {}
    for obj, source in found:
        if not isinstance(obj, Agent):
            raise AgentLoadError(f"{source} is a {type(obj).__name__}, not a tether_sdk.Agent")
        try:
            obj.check()
        except AgentDefinitionError as err:
            raise AgentLoadError(f"{source}: {err}") from err
        if obj.name in names:
            if any(a is obj for a, _ in out):
                continue  # the same agent named twice (TETHER_AGENTS and its entry point)
            raise AgentLoadError(
                f"two agents are named {obj.name!r}: {names[obj.name]} and {source}"
            )
        names[obj.name] = source
        out.append((obj, source))
    return out


class AgentRegistry:
    def __init__(
        self,
        loaded: list[LoadedAgent],
        default: str,
        mcp_overrides: OperatorOverrides | None = None,
    ) -> None:
        self.agents = {a.name: a for a in loaded}
        self.default = default
        self._stack = AsyncExitStack()
        self.mcp = MCPHub(mcp_overrides, on_tools=self._on_tools)
        self.conformance: Plan | None = None

    @classmethod
    def load(cls, settings: Settings) -> AgentRegistry:
        found = discover(settings)
        try:
            loaded = [LoadedAgent(a, src, make_model(a, settings)) for a, src in found]
        except ModelConfigError as err:
            raise AgentLoadError(str(err)) from err
        plan = settings.conformance_plan
        rigged: Plan | None = None
        if plan:
            # `tether conformance` only: one tool of one agent, driven and watched (never in
            # production; see conformance.py).
            from tether_runtime.engine.conformance import rig

            rigged = rig(loaded, plan, production=settings.env == "production")
        names = sorted(a.name for a in loaded)
        default = settings.default_agent if settings.default_agent in names else ""
        if not default and len(names) == 1:
            default = names[0]
        registry = cls(loaded, default, load_overrides(settings.mcp_overrides))
        registry.conformance = rigged
        return registry

    def _on_tools(self, loaded: LoadedAgent) -> None:
        """The agent's tools are (again) all known: conformance's tool is watched in them."""
        plan = self.conformance
        if plan is not None and plan.agent == loaded.name:
            from tether_runtime.engine.conformance import watch

            watch(loaded, plan)

    async def start(self, database_url: str, *, transaction_pooler: bool = False) -> None:
        """Open each agent's resources (its lifespan) once for this process."""
        host = Host(database_url=database_url, transaction_pooler=transaction_pooler)
        for a in self.agents.values():
            if a.agent.lifespan is not None:
                a.state = await self._stack.enter_async_context(a.agent.lifespan(host))
        for a in self.agents.values():
            # Its MCP servers connected and their tools listed, beside its own.
            await self.mcp.attach(a)
            if not a.agent.mcp_servers:
                self._on_tools(a)

    async def close(self) -> None:
        await self.mcp.close()  # stdio servers stop with the runtime
        await self._stack.aclose()
        for a in self.agents.values():
            aclose = getattr(a.model, "aclose", None)
            if aclose is not None:
                await aclose()  # a provider's HTTP client

    def resolve(self, name: str) -> str:
        """The agent a run asks for ('' is the default), or AGENT_NOT_FOUND."""
        name = name or self.default
        if name not in self.agents:
            known = ", ".join(sorted(self.agents)) or "none"
            if not name:
                raise AgentNotFound(f"name an agent: no default is configured (loaded: {known})")
            raise AgentNotFound(f"no agent named {name!r} is loaded (loaded: {known})")
        return name

    def tool_origins(self, name: str) -> dict[str, str]:
        """Each of the agent's MCP tools' origin (where it and its effect came from), by name."""
        return dict(tool_origins(self.get(name).agent))

    def get(self, name: str) -> LoadedAgent:
        return self.agents[self.resolve(name)]

    def views(self) -> list[AgentView]:
        """The loaded agents' views, sorted by name; each built once per process (a graph's
        schemas take pydantic tens of milliseconds, and ListAgents is asked per LangGraph run)."""
        out: list[AgentView] = []
        for _, a in sorted(self.agents.items()):
            if "view" not in a.cache:
                a.cache["view"] = view_of(a.agent)
            out.append(a.cache["view"])
        return out


async def with_mcp_tools(agent: Agent, settings: Settings) -> Agent:
    """The agent with its MCP servers' tools listed as a runtime lists them (the operator's
    overrides applied), the servers closed again (`tether conformance`: each case's runtimes
    connect their own)."""
    if not agent.mcp_servers:
        return agent
    hub = MCPHub(load_overrides(settings.mcp_overrides))
    loaded = LoadedAgent(agent, "tether conformance", agent.model)  # type: ignore[arg-type]
    try:
        await hub.attach(loaded)
    finally:
        await hub.close()
    return loaded.agent


def mcp_tool_names(agent: Agent) -> set[str]:
    """The names of the agent's tools that come from its MCP servers."""
    return set(tool_origins(agent))


def view_of(agent: Agent) -> AgentView:
    # A graph agent describes its graph's schemas itself (tether_langgraph.GraphAgent.json_schemas).
    schemas = getattr(agent, "json_schemas", None)
    found: dict[str, Any] = schemas() if callable(schemas) else {}
    origins = tool_origins(agent)
    return AgentView(
        kind="graph" if is_driven(agent) else "native",
        input_schema_json=_schema_text(found.get("input")),
        output_schema_json=_schema_text(found.get("output")),
        state_schema_json=_schema_text(found.get("state")),
        name=agent.name,
        description=agent.description,
        tools=tuple(
            AgentToolView(
                name=t.name,
                description=t.description,
                effect=str(t.effect),
                action=t.action,
                risk=t.risk if t.effect == "write" else "",
                origin=origins.get(t.name, ""),
            )
            for t in agent.tools
        ),
    )


def _schema_text(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True) if schema else ""
