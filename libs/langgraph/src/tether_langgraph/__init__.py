"""LangGraph graphs as Tether agents.

    from tether_langgraph import GraphAgent, write_tool

    agent = GraphAgent(name="ops", description="Restarts services", graph=builder)

or no wrapper at all: `TETHER_AGENTS=pkg.module:graph` (a compiled graph or a StateGraph,
named after the attribute) or `TETHER_AGENTS=./langgraph.json` (its graphs, `_config.py`).

A graph runs unmodified: Tether checkpoints it (the conversation is LangGraph's thread), turns
its streams into Tether's events, its `interrupt()` into a Tether interrupt (see
`_interrupts.py` for the payload convention) and runs the tools marked with `write_tool` at most
once. Only a runtime that loads a GraphAgent imports this package (and so langgraph)."""

from tether_langgraph._agent import GraphAgent, GraphModel, graph_agent, is_graph
from tether_langgraph._config import GraphConfigError, agents_from_config
from tether_langgraph._interrupts import TEXT_SCHEMA
from tether_langgraph._tools import WriteTool, idempotency_key, write_task, write_tool

__all__ = [
    "TEXT_SCHEMA",
    "GraphAgent",
    "GraphConfigError",
    "GraphModel",
    "WriteTool",
    "agents_from_config",
    "graph_agent",
    "idempotency_key",
    "is_graph",
    "write_task",
    "write_tool",
]
