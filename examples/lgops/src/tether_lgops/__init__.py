"""An example LangGraph graph run as a Tether agent (TETHER_AGENTS=tether_lgops:agent)."""

from tether_lgops.agent import agent

__all__ = ["agent"]
