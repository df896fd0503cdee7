"""How an AG-UI run request becomes Tether's: `threadId` is the caller's conversation (found, or
made for an unknown thread), `runId` the client's name for what this request starts. A new turn
starts a Tether run (StartRun with `runId` as its client id and idempotency key: a retried
request is the same run), on the bus for the request's stream to follow (bus_feed.py);
`resume[]` answers the thread's waiting interrupt (ResumeRun: the same Tether run continues, as
its next stretch, the new AG-UI run), with the runtime's idempotency, conditional claim and
re-authorization."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import ClientIdTaken, FailedPrecondition, InvalidArgument, NotFound

from tether_gateway.agui import interrupts
from tether_gateway.agui.run_input import RunInput
from tether_gateway.auth import Caller
from tether_gateway.bus_feed import BusStart, start_followed
from tether_gateway.langgraph import lookup
from tether_gateway.langgraph.assistants_api import agent_named
from tether_gateway.langgraph.stretches import starts_stretch
from tether_gateway.runtime_client import Credential, RuntimeClient
from tether_gateway.state import GatewayState


@dataclass(frozen=True)
class Begun:
    """The Tether run under the AG-UI run, and which of its stretches the AG-UI run is.
    `on_bus`: a run started on the bus, for the stream to follow there (bus_feed.held)."""

    run: resources_pb2.Run
    stretch: int
    on_bus: BusStart | None = None


async def begin(gw: GatewayState, caller: Caller, agent_name: str, inp: RunInput) -> Begun:
    client = gw.client()
    agent = await agent_named(client, caller.credential, agent_name)
    if inp.resume:
        return await _resume(gw, caller, agent.name, inp)
    await _run_id_free(client, caller.credential, inp)
    conv = await client.create_conversation(
        rs.CreateConversationRequest(title=inp.title, client_id=inp.thread_id), caller.credential
    )
    started, on_bus = await start_followed(
        gw.bus,
        lambda req: client.start_run(req, caller.credential),
        rs.StartRunRequest(
            conversation_id=conv.conversation.id,
            text=inp.text,
            agent=agent.name,
            idempotency_key=f"agui:{inp.run_id}",
            client_run_id=inp.run_id,
        ),
    )
    if started.run.agent != agent.name:  # (a replayed start: never one on the bus)
        raise ClientIdTaken(f"runId {inp.run_id} names a run of another agent")
    return Begun(started.run, 0, on_bus)


async def _run_id_free(client: RuntimeClient, token: Credential, inp: RunInput) -> None:
    """Before anything is made (an unknown thread's conversation): the runId names nothing
    yet, or this thread's start (a repeated request, which StartRun answers with that run)."""
    try:
        found = await client.get_run(rs.GetRunRequest(client_run_id=inp.run_id), token)
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND:
            return
        raise
    if found.answered_interrupt_id or found.client_conversation_id != inp.thread_id:
        raise ClientIdTaken(f"runId {inp.run_id} already names another run")


async def _resume(gw: GatewayState, caller: Caller, agent: str, inp: RunInput) -> Begun:
    client, token = gw.client(), caller.credential
    if len(inp.resume) != 1:
        raise InvalidArgument("a Tether run waits on one interrupt at a time: resume answers it")
    entry = inp.resume[0]
    try:
        conv = await client.get_conversation(
            rs.GetConversationRequest(client_id=inp.thread_id), token
        )
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.NOT_FOUND:
            raise
        raise FailedPrecondition(f"thread {inp.thread_id} has no interrupt to answer") from err
    latest = await lookup.latest_run(client, token, conv.conversation.id)
    interrupt = await _interrupt(client, token, latest, entry.interrupt_id)
    assert latest is not None
    if latest.agent != agent:
        raise NotFound(f"interrupt {entry.interrupt_id} is not one of agent {agent}'s")
    await gw.limiter.check(gw.redis, "resume", caller.principal.user_id)
    ans = interrupts.answer(interrupt, entry)
    resumed = await client.resume_run(
        rs.ResumeRunRequest(
            run_id=latest.id,
            interrupt_id=interrupt.id,
            decision=ans.decision,  # type: ignore[arg-type]
            input=ans.input,
            value_json=ans.value_json,
            idempotency_key=interrupts.idempotency_key(conv.conversation.id, interrupt.id, ans),
            client_run_id=inp.run_id,
        ),
        token,
    )
    events = await lookup.read_log(client, token, resumed.run)
    return Begun(resumed.run, stretch_after(events, interrupt.id))


async def _interrupt(
    client: RuntimeClient, token: Credential, latest: resources_pb2.Run | None, interrupt_id: str
) -> resources_pb2.Interrupt:
    """The thread's interrupt `interrupt_id`: its newest run's pending one, or one that run
    raised and that was answered already (a repeated resume, which the runtime answers with the
    first answer or refuses)."""
    if latest is not None and latest.pending_interrupt.id == interrupt_id:
        return latest.pending_interrupt
    if latest is not None:
        for ev in await lookup.read_log(client, token, latest):
            raised = ev.interrupt
            if ev.WhichOneof("event") == "interrupt" and raised.interrupt_id == interrupt_id:
                return resources_pb2.Interrupt(
                    id=raised.interrupt_id,
                    run_id=latest.id,
                    kind=raised.kind,
                    payload=raised.payload,
                )
    raise FailedPrecondition(f"interrupt {interrupt_id} is not waiting on this thread")


def stretch_after(events: list[events_pb2.RunEvent], interrupt_id: str) -> int:
    """The stretch the answer to `interrupt_id` began (its InterruptResolved starts it)."""
    stretch = 0
    for ev in events:
        if ev.WhichOneof("event") == "interrupt_resolved" and starts_stretch(ev):
            stretch += 1
            if ev.interrupt_resolved.interrupt_id == interrupt_id:
                return stretch
    raise NotFound(f"the answer to interrupt {interrupt_id} began no run")
