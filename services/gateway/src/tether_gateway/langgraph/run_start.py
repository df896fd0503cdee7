"""How a LangGraph run request becomes Tether's: on a thread whose newest interrupt waits,
`command.resume` answers it (ResumeRun: the same Tether run continues, as the next stretch, a
new LangGraph run); otherwise StartRun, from the input whole (`input_json`) and its last human
message's text, on the bus for a request that reads the run from its start (bus_feed.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import cast

from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import FailedPrecondition, InvalidArgument, TetherError

from tether_gateway.auth import Caller
from tether_gateway.bus_feed import BusStart, start_followed
from tether_gateway.langgraph import answers, lookup
from tether_gateway.langgraph.assistants_api import agent_named
from tether_gateway.langgraph.run_request import RunRequest, input_text
from tether_gateway.langgraph.stretches import starts_stretch
from tether_gateway.state import GatewayState
from tether_gateway.validation import compact_object

MAX_INPUT_JSON = 256_000  # as the runtime's (run_input.py on lg-runtime)
_BUSY = frozenset(
    {
        resources_pb2.RUN_STATUS_QUEUED,
        resources_pb2.RUN_STATUS_RUNNING,
        resources_pb2.RUN_STATUS_WAITING,
    }
)


@dataclass(frozen=True)
class Begun:
    """The Tether run a request started or resumed, the stretch (the LangGraph run) it made,
    and whether the run is a graph agent's (None: not known here, lookup.is_graph tells).
    `on_bus`: a run started on the bus, for its reader to follow there (bus_feed.held)."""

    run: resources_pb2.Run
    stretch: int
    graph: bool | None
    on_bus: BusStart | None = None


async def begin(
    gw: GatewayState, caller: Caller, thread_id: str, req: RunRequest, *, reads: bool = False
) -> Begun:
    """Resume the thread's interrupted Tether run, or start one. `reads`: the caller reads the
    run's log from its start (a stream, a wait), so a new run is started on the bus."""
    client = gw.client()
    # Both at once (one round trip before the run starts); the assistant's error comes first.
    agent_found, latest_found = await asyncio.gather(
        agent_named(client, caller.credential, req.assistant_id),
        lookup.latest_run(client, caller.credential, thread_id),
        return_exceptions=True,
    )
    for found in (agent_found, latest_found):
        if isinstance(found, BaseException):
            raise found
    agent = cast("resources_pb2.Agent", agent_found)
    latest = cast("resources_pb2.Run | None", latest_found)
    if req.has_resume:
        run, stretch = await _resume(gw, caller, thread_id, latest, req)
        return Begun(run, stretch, _kind_of(agent, run))
    try:
        text = input_text(req.input)
    except InvalidArgument:
        if not req.input:
            raise
        text = ""  # a graph's own input: the runtime reads input_json (a native agent: 422)
    input_json = compact_object(req.input, "input", MAX_INPUT_JSON) if req.input else ""
    if latest is not None and latest.status in _BUSY and req.multitask_strategy == "reject":
        raise FailedPrecondition(
            "Thread is already running a task. Wait for it to finish or choose a different "
            "multitask strategy.",
            reason="RUN_ACTIVE",
        )
    request = rs.StartRunRequest(
        conversation_id=thread_id, text=text, agent=agent.name, input_json=input_json
    )

    def start(req: rs.StartRunRequest) -> Awaitable[rs.StartRunResponse]:
        return client.start_run(req, caller.credential)

    if reads:
        started, on_bus = await start_followed(gw.bus, start, request)
    else:
        started, on_bus = await start(request), None
    return Begun(started.run, 0, _kind_of(agent, started.run), on_bus)


def _kind_of(agent: resources_pb2.Agent, run: resources_pb2.Run) -> bool | None:
    """Whether the run is a graph's, from the agent the request named (ListAgents was asked
    once already), when the run is that agent's."""
    return agent.kind == "graph" if agent.name == run.agent else None


async def _resume(
    gw: GatewayState,
    caller: Caller,
    thread_id: str,
    latest: resources_pb2.Run | None,
    req: RunRequest,
) -> tuple[resources_pb2.Run, int]:
    """ResumeRun on the thread's newest interrupt, keyed by the request: a doubled resume that
    comes after the first already resumed the run is answered by the runtime with the first
    (the same key and body), one that answers differently is refused (409), never a second
    answer; a thread with no interrupt to answer is a 409."""
    client = gw.client()
    interrupt = await _newest_interrupt(gw, caller, latest)
    await gw.limiter.check(gw.redis, "resume", caller.principal.user_id)
    ans = answers.answer(interrupt, req.resume)
    resumed = await client.resume_run(
        rs.ResumeRunRequest(
            run_id=interrupt.run_id,
            interrupt_id=interrupt.id,
            decision=ans.decision,  # type: ignore[arg-type]
            input=ans.input,
            value_json=ans.value_json,
            idempotency_key=answers.idempotency_key(thread_id, interrupt.id, req.resume),
        ),
        caller.credential,
    )
    return resumed.run, await _stretch_after(gw, caller, resumed.run, interrupt.id)


async def _newest_interrupt(
    gw: GatewayState, caller: Caller, latest: resources_pb2.Run | None
) -> resources_pb2.Interrupt:
    """The pending interrupt of the thread's newest run; once answered, the newest it raised
    (so that a repeated resume reaches the runtime, which replays the first answer). A run read
    as interrupted whose interrupt was answered a moment ago carries none pending: its log says
    which (two resumes at once once read an empty interrupt here, and the second was refused
    as an answer of the wrong kind)."""
    if (
        latest is not None
        and latest.status == resources_pb2.RUN_STATUS_INTERRUPTED
        and latest.HasField("pending_interrupt")
    ):
        return latest.pending_interrupt
    raised = None
    if latest is not None:
        for ev in await lookup.read_log(gw.client(), caller.credential, latest):
            if ev.WhichOneof("event") == "interrupt":
                raised = ev.interrupt
    if raised is None or latest is None:
        raise FailedPrecondition("the thread has no interrupt to resume")
    return resources_pb2.Interrupt(
        id=raised.interrupt_id, run_id=latest.id, kind=raised.kind, payload=raised.payload
    )


async def _stretch_after(
    gw: GatewayState, caller: Caller, run: resources_pb2.Run, interrupt_id: str
) -> int:
    """The stretch the answer to `interrupt_id` began (its InterruptResolved starts it)."""
    events = await lookup.read_log(gw.client(), caller.credential, run)
    stretch = 0
    for ev in events:
        if ev.WhichOneof("event") == "interrupt_resolved":
            if starts_stretch(ev):
                stretch += 1
            if ev.interrupt_resolved.interrupt_id == interrupt_id:
                return stretch
    raise TetherError("the answered interrupt is not in the run's log")
