"""The ops graph as a Tether agent: the whole of what Tether needs besides the graph."""

from __future__ import annotations

from tether_langgraph import GraphAgent
from tether_sdk import Limits

from tether_lgops import infra
from tether_lgops.graph import graph

agent = GraphAgent(
    name="lgops",
    description="A LangGraph ops agent: checks services and restarts one after a person approves.",
    graph=graph,
    limits=Limits(max_steps=25, run_deadline_s=600, tool_timeout_s=30),
    migrations="tether_lgops:migrations",
    lifespan=infra.lifespan,
    seed=infra.seed,
)
