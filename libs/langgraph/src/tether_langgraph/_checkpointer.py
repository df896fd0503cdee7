"""Where a graph run's checkpoints are kept: the one seam between the graph driver and the
checkpointer.

Tether's Postgres saver (`tether_langgraph.checkpointer.TetherCheckpointer`, its writes fenced
by the run's lease epoch) on the runtime's pool, keyed by the conversation as LangGraph's thread.
Where that module is not installed yet, LangGraph's InMemorySaver keeps the checkpoints in this
process: resume then works only on the runtime process that paused the run, and a crash loses
the graph's progress (the run starts the graph over)."""

from __future__ import annotations

import importlib
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

_IN_MEMORY = InMemorySaver()


def _durable() -> Any:
    try:
        return importlib.import_module("tether_langgraph.checkpointer")
    except ImportError:
        return None


def checkpointer_for(host: Any) -> BaseCheckpointSaver[Any]:
    """The checkpointer for one execution of a run, fenced by its lease epoch; the only writer
    of the run's thread while it holds the lease, so it keeps its last read (the driver's read
    of the state, and then LangGraph's of the same checkpoint, cost one statement)."""
    durable = _durable()
    if durable is None:
        return _IN_MEMORY
    saver: BaseCheckpointSaver[Any] = durable.TetherCheckpointer(host.pool).fenced(
        host.run_id, host.epoch, sole_writer=True
    )
    return saver


def lease_lost_type() -> type[BaseException] | None:
    """The error the durable saver raises when the run's lease was taken over."""
    durable = _durable()
    if durable is None:
        return None
    lost: type[BaseException] = durable.LeaseLost
    return lost
