"""ListAgents' views are built once per process: a graph agent's JSON Schemas take pydantic tens
of milliseconds to describe, and the gateway's /langgraph API lists the agents for each run it
starts (that was most of the runtime's CPU per LangGraph run: 108-135 ms, 25-32 ms without)."""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, MessagesState, StateGraph
from tether_common.config import Settings
from tether_langgraph import GraphAgent
from tether_runtime.engine.agents import AgentRegistry, view_of
from tether_runtime.engine.loaded_agent import LoadedAgent


def _graph() -> StateGraph[Any]:
    builder = StateGraph(MessagesState)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    return builder


def test_each_agents_view_is_built_once_and_the_same_from_then_on() -> None:
    graph = GraphAgent(name="g", description="a graph", graph=_graph())
    native = AgentRegistry.load(Settings()).get("opspilot")
    calls: list[str] = []
    described = graph.json_schemas

    def counted() -> dict[str, Any]:
        calls.append("g")
        return described()

    object.__setattr__(graph, "json_schemas", counted)
    loaded = LoadedAgent(graph, "test", native.model)
    registry = AgentRegistry([loaded, native], "")
    first = registry.views()
    again = registry.views()
    assert calls == ["g"]  # described once, for the first ListAgents
    assert [v.name for v in first] == ["g", "opspilot"]
    assert first == again == [view_of(graph), view_of(native.agent)]
    assert first[0].kind == "graph" and '"messages"' in first[0].state_schema_json
    first.clear()  # a caller's list is its own
    assert [v.name for v in registry.views()] == ["g", "opspilot"]
