"""A thread's state as LangGraph shows it (`values`, pending `__interrupt__`s): its newest Tether
run's log replayed over the messages before it (frames.py, sending nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.runtime.v1 import resources_pb2

from tether_gateway.langgraph import lookup
from tether_gateway.langgraph.frames import StretchFrames
from tether_gateway.runtime_client import Credential, RuntimeClient


async def thread_values(
    client: RuntimeClient, token: Credential, thread_id: str, latest: resources_pb2.Run | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The state's values and the pending interrupts (empty unless the run waits on one)."""
    if latest is None:
        return {}, []
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
    interrupts = frames.interrupts if interrupted else []
    values = frames.values()
    values.pop("__interrupt__", None)
    return values, interrupts
