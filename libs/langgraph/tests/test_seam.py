"""The engine knows a LangGraph agent only through its `drive(host)` seam: a runtime that loads
no graph agent imports no langgraph, and a GraphAgent is what the seam calls driven."""

from __future__ import annotations

import subprocess
import sys

import pytest
from langgraph.graph import START, MessagesState, StateGraph
from tether_langgraph import GraphAgent
from tether_runtime.engine import driven
from tether_sdk import Agent, ScriptedModel


@pytest.mark.process  # starts a process: not in test-fast
def test_the_runtime_imports_no_langgraph_unless_a_graph_agent_is_loaded() -> None:
    code = (
        "import sys\n"
        "import tether_runtime.server, tether_runtime.engine.run_loop, tether_runtime.engine.driven\n"
        "import tether_runtime.engine.worker, tether_runtime.engine.agents\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core', 'tether_langgraph'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_a_graph_agent_is_driven_and_a_native_agent_is_not() -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    assert driven.is_driven(GraphAgent(name="g", description="d", graph=builder))
    native = Agent(name="n", description="d", instructions="", model=ScriptedModel(lambda r: "hi"))
    assert not driven.is_driven(native)


def test_tether_model_does_not_replace_a_graphs_own_models() -> None:
    """TETHER_MODEL=openai points native agents at one provider; a graph calls its own models,
    so its placeholder stays (and needs no provider key)."""
    from tether_common.config import Settings
    from tether_runtime.engine.model_choice import make_model

    builder = StateGraph(MessagesState)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    agent = GraphAgent(name="g", description="d", graph=builder)
    assert make_model(agent, Settings(model="openai")) is agent.model
