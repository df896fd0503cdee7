"""The comparison graph (lgcompare_graph.py) as a Tether agent:
TETHER_AGENTS=tether_bench.lgcompare:agent."""

from __future__ import annotations

from tether_langgraph import GraphAgent

from tether_bench.lgcompare_graph import graph

agent = GraphAgent(
    name="lgcompare",
    description="The LangGraph comparison graph: streams, asks, then appends a line.",
    graph=graph,
)
