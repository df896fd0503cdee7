"""Where a graph run's checkpoints are kept: the one seam between the graph driver and the
checkpointer. Until Tether's Postgres saver (fenced by the run's lease epoch) is wired here,
LangGraph's InMemorySaver keeps them in this process (one runtime process only: a takeover by
another process would not find them)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

_IN_MEMORY = InMemorySaver()


def checkpointer_for(host: Any) -> BaseCheckpointSaver[Any]:
    """The checkpointer for one execution of a run (`host.pool`, `host.run_id`, `host.epoch`
    fence a durable one)."""
    return _IN_MEMORY
