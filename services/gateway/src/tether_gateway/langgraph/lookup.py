"""What the LangGraph view reads from the runtime: a thread's Tether runs, a run's event log up
to its last event, the thread's messages before a run, and a LangGraph run id's stretch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_client.rpc import EOF_MARK
from tether_common.errors import NotFound

from tether_gateway.langgraph import ids, messages
from tether_gateway.langgraph.stretches import Stretch, stretches
from tether_gateway.runtime_client import Credential, RuntimeClient

MAX_THREAD_RUNS = 200
_MESSAGES_PAGE = 500


async def is_graph(client: RuntimeClient, token: Credential, agent: str) -> bool:
    """Whether the agent is a LangGraph graph (its runs carry LangGraph's own stream)."""
    return any(
        a.name == agent and a.kind == "graph" for a in (await client.list_agents(token)).agents
    )


async def thread_runs(
    client: RuntimeClient, token: Credential, thread_id: str, limit: int = MAX_THREAD_RUNS
) -> list[resources_pb2.Run]:
    """The thread's Tether runs, newest first (404 for a conversation not the caller's)."""
    req = rs.ListRunsRequest(conversation_id=thread_id, page_size=limit)
    return list((await client.list_runs(req, token)).runs)


async def latest_run(
    client: RuntimeClient, token: Credential, thread_id: str
) -> resources_pb2.Run | None:
    runs = await thread_runs(client, token, thread_id, limit=1)
    return runs[0] if runs else None


async def read_log(
    client: RuntimeClient, token: Credential, run: resources_pb2.Run
) -> list[events_pb2.RunEvent]:
    """The run's events from sequence 1 to its last at the time of `run` (a GetRun's)."""
    if run.last_sequence == 0 or run.events_expired:
        return []
    call = await client.stream_events(rs.StreamRunEventsRequest(run_id=run.id), token)
    events: list[events_pb2.RunEvent] = []
    try:
        while (batch := await call.read()) is not EOF_MARK:
            for ev in batch.events:  # type: ignore[attr-defined]
                if ev.WhichOneof("event") == "reset":
                    return []
                events.append(ev)
            if events and events[-1].sequence >= run.last_sequence:
                break
    finally:
        call.cancel()
    return events


async def history(
    client: RuntimeClient, token: Credential, run: resources_pb2.Run
) -> list[dict[str, Any]]:
    """The thread's messages up to and including the run's own user message, as LangChain's
    dicts: the state a run starts from."""
    return [messages.stored(m) for m in await stored_before(client, token, run)]


async def stored_before(
    client: RuntimeClient, token: Credential, run: resources_pb2.Run
) -> list[resources_pb2.Message]:
    """The conversation's stored messages up to and including the run's own user message.
    Messages are append-only, so every pod reads the same."""
    out: list[resources_pb2.Message] = []
    page = ""
    while True:
        req = rs.ListMessagesRequest(
            conversation_id=run.conversation_id, page_size=_MESSAGES_PAGE, page_token=page
        )
        resp = await client.list_messages(req, token)
        for m in resp.messages:
            if m.run_id == run.id and m.id != run.user_message_id:
                return out
            out.append(m)
            if m.id == run.user_message_id:
                return out
        page = resp.next_page_token
        if not page:
            return out


@dataclass(frozen=True)
class LgRun:
    """A LangGraph run: one stretch of a Tether run, with the run's log as read (none, and the
    stretch as an open one, for the first stretch of a run whose state tells its status)."""

    thread_id: str
    run: resources_pb2.Run
    events: list[events_pb2.RunEvent]
    stretch: Stretch

    @property
    def run_id(self) -> str:
        return ids.stretch_run_id(self.run.id, self.stretch.index)

    @property
    def status(self) -> str:
        return self.stretch.status(self.run)


async def lg_runs(
    client: RuntimeClient, token: Credential, thread_id: str, run: resources_pb2.Run
) -> list[LgRun]:
    """The LangGraph runs of one Tether run, oldest first."""
    events = await read_log(client, token, run)
    return [LgRun(thread_id, run, events, s) for s in stretches(events)]


# A run interrupted or completed ended its first stretch at an interrupt or at done (Done, Error
# and Cancelled end a run: none came before): `success` either way, which the run alone tells
# (stretches.py's open status of such a run is `success` too).
_FIRST_SUCCEEDED = frozenset(
    {resources_pb2.RUN_STATUS_INTERRUPTED, resources_pb2.RUN_STATUS_COMPLETED}
)


async def find_run(client: RuntimeClient, token: Credential, thread_id: str, run_id: str) -> LgRun:
    """The LangGraph run `run_id` of the thread; 404 when it names none. The first stretch of
    an interrupted or completed run is found without reading its log (the SDK asks for the run
    after each stream that closes without an `end` event, as every one does)."""
    for run in await thread_runs(client, token, thread_id):
        n = ids.stretch_of(run.id, run_id, most=run.last_sequence)
        if n is None:
            continue
        if n == 0 and run.status in _FIRST_SUCCEEDED:
            return LgRun(thread_id, run, [], Stretch(0, 1))
        found = await lg_runs(client, token, thread_id, run)
        if n < len(found):
            return found[n]
    raise NotFound(f"run {run_id} not found on thread {thread_id}")


async def find_stretch(
    client: RuntimeClient, token: Credential, thread_id: str, run_id: str
) -> tuple[resources_pb2.Run, int]:
    """The Tether run and the stretch the LangGraph run `run_id` is (404 when it names none),
    for a join: a run's first stretch always is, so its log is read only for a later one."""
    for run in await thread_runs(client, token, thread_id):
        n = ids.stretch_of(run.id, run_id, most=run.last_sequence)
        if n == 0:
            return run, 0
        if n is not None and n < len(await lg_runs(client, token, thread_id, run)):
            return run, n
    raise NotFound(f"run {run_id} not found on thread {thread_id}")


async def newest_lg_run(client: RuntimeClient, token: Credential, thread_id: str) -> LgRun | None:
    run = await latest_run(client, token, thread_id)
    if run is None:
        return None
    return (await lg_runs(client, token, thread_id, run))[-1]
