"""A thread's state as LangGraph shows it (`values`, pending `__interrupt__`s): its newest Tether
run's log replayed over the messages before it (frames.py, sending nothing)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tether.runtime.v1 import resources_pb2

from tether_gateway.langgraph import lookup
from tether_gateway.langgraph.frames import StretchFrames
from tether_gateway.runtime_client import Credential, RuntimeClient


@dataclass(frozen=True)
class ThreadValues:
    """A thread's state: its values (a dict, or a graph's state that is no dict as it is), the
    pending interrupts (empty unless the run waits on one) and, for a graph's interrupt, the
    node that asked and the nodes a resume runs (empty: the native mapping's)."""

    values: Any
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    asking: str = ""
    next: list[str] = field(default_factory=list)


async def thread_values(
    client: RuntimeClient, token: Credential, thread_id: str, latest: resources_pb2.Run | None
) -> ThreadValues:
    if latest is None:
        return ThreadValues({})
    events, graph = await asyncio.gather(
        lookup.read_log(client, token, latest), lookup.is_graph(client, token, latest.agent)
    )
    frames = StretchFrames(
        thread_id=thread_id,
        tether_run_id=latest.id,
        stretch=-1,  # no stretch: only the state is wanted
        # a graph's log brings its state: the thread's messages only if it has none yet
        history=None if graph else await lookup.history(client, token, latest),
        modes=frozenset(),
        graph=graph,
    )
    for ev in events:
        if frames.needs_history(ev):
            frames.set_history(await lookup.history(client, token, latest))
        frames.feed(ev)
    if frames.needs_history(None):
        frames.set_history(await lookup.history(client, token, latest))
    interrupted = latest.status == resources_pb2.RUN_STATUS_INTERRUPTED
    if not interrupted:
        frames.interrupts = []
    values = frames.values()
    if isinstance(values, dict):
        values.pop("__interrupt__", None)
        if frames.graph and not isinstance(frames.graph_state, dict):
            values = frames.graph_state  # {"__interrupt__": ...} alone: the state is no dict
    if not interrupted:
        return ThreadValues(values)
    asking, next_nodes = frames.asking
    return ThreadValues(values, frames.interrupts, asking, next_nodes)
