"""The gRPC servicer: translate proto <-> domain and call the engine. Authentication, tracing,
the latency metric and the error contract are the interceptor's (interceptor.py); no business
rule lives here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.auth import Principal
from tether_common.ids import new_id
from tether_common.input_parsers import timestamp
from tether_common.tracing import inject_carrier
from tether_proto import wire

from tether_runtime.api import approvals as approvals_api
from tether_runtime.api import audit as audit_api
from tether_runtime.api import client_ids, convert, erasure, run_listing
from tether_runtime.api import runs as runs_api
from tether_runtime.api.caller import caller
from tether_runtime.api.event_stream import EventStream
from tether_runtime.api.interceptor import opened
from tether_runtime.domain import events as ev
from tether_runtime.domain.views import RunView
from tether_runtime.engine import concurrent_runs, resume
from tether_runtime.engine.process import Engine
from tether_runtime.store.audit import AuditContext

# The decisions a caller may send (those with an answer word), by their stored name ("approved").
DECISION_IN = {d: wire.DECISION.name[d] for d in wire.ANSWER_OF}


class RuntimeServicer:
    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.stream = EventStream(engine.pool, engine.bus, engine.settings.stream_quiet_check_s)

    @staticmethod
    def _audit_context(context: grpc.aio.ServicerContext[Any, Any]) -> AuditContext:
        """For the audit log: the address the gateway saw (x-forwarded-for), else the peer."""
        md = dict(context.invocation_metadata() or ())
        peer = context.peer() or ""
        forwarded = str(md.get("x-forwarded-for", ""))
        return AuditContext(client_address=forwarded or peer, details={"peer": peer[:300]})

    async def CreateConversation(
        self, request: pb.CreateConversationRequest, context: Any
    ) -> pb.CreateConversationResponse:
        p = caller()
        if request.client_id:
            conv, existed = await client_ids.create_conversation(
                self.e.pool, p, request.client_id, request.title
            )
            return pb.CreateConversationResponse(
                conversation=convert.conversation_pb(conv), existed=existed
            )
        conv = await runs_api.create_conversation(self.e.pool, p, request.title)
        return pb.CreateConversationResponse(conversation=convert.conversation_pb(conv))

    async def GetConversation(
        self, request: pb.GetConversationRequest, context: Any
    ) -> pb.GetConversationResponse:
        p = caller()
        if request.client_id and not request.conversation_id:
            conv = await client_ids.get_conversation(self.e.pool, p, request.client_id)
            return pb.GetConversationResponse(conversation=convert.conversation_pb(conv))
        conv = await runs_api.get_conversation(self.e.pool, p, request.conversation_id)
        return pb.GetConversationResponse(conversation=convert.conversation_pb(conv))

    async def DeleteConversation(
        self, request: pb.DeleteConversationRequest, context: Any
    ) -> pb.DeleteConversationResponse:
        p = caller()
        erased = await erasure.delete_conversation(self.e.pool, p, request.conversation_id)
        return pb.DeleteConversationResponse(deleted_runs=len(erased.runs))

    async def ListConversations(
        self, request: pb.ListConversationsRequest, context: Any
    ) -> pb.ListConversationsResponse:
        p = caller()
        rows, token = await runs_api.list_conversations(
            self.e.pool, p, request.page_size, request.page_token
        )
        return pb.ListConversationsResponse(
            conversations=[convert.conversation_pb(c) for c in rows], next_page_token=token
        )

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: Any
    ) -> pb.ListMessagesResponse:
        p = caller()
        rows, token = await runs_api.list_messages(
            self.e.pool, p, request.conversation_id, request.page_size, request.page_token
        )
        return pb.ListMessagesResponse(
            messages=[convert.message_pb(m) for m in rows], next_page_token=token
        )

    async def StartRun(self, request: pb.StartRunRequest, context: Any) -> pb.StartRunResponse:
        p = caller()
        named = request.client_run_id
        if named and (
            earlier := await client_ids.check_start(self.e.pool, p, named, request.conversation_id)
        ):
            view = await runs_api.get_run(self.e.pool, p, earlier)
            return pb.StartRunResponse(run=convert.run_pb(view), replayed=True)
        run_id = runs_api.callers_run_id(request.run_id) if request.run_id else ""
        # A caller that names the run listens for its batches already: it gets the first event,
        # which is not published, here (as StartRunAndStreamEvents hands it over).
        streamed = runs_api.StreamedStart.listening() if run_id else None
        view, replayed = await self._start(p, request, context, run_id, streamed)
        if named:
            await client_ids.name_run(self.e.pool, p, named, view)
        first = streamed.first if streamed is not None and view.id == run_id else None
        return pb.StartRunResponse(
            run=convert.run_pb(view),
            replayed=replayed,
            events=[ev.RunEvent.FromString(first)] if first is not None else [],
        )

    async def _start(
        self,
        p: Principal,
        request: pb.StartRunRequest | pb.StartRunAndStreamEventsRequest,
        context: Any,
        run_id: str = "",
        streamed: runs_api.StreamedStart | None = None,
    ) -> tuple[RunView, bool]:
        view, replayed, active = await runs_api.start_run_once(
            self.e.pool,
            self.e.agents,
            p,
            request.conversation_id,
            request.text,
            request.idempotency_key,
            request.agent,
            inject_carrier(),
            run_id=run_id,
            streamed=streamed,
            input_json=request.input_json,
            admissions=self.e.admissions,
        )
        if active and concurrent_runs.policy_of(self.e.agents.get(view.agent)) == "interrupt":
            await concurrent_runs.interrupt_active(
                self.e.pool, self.e.bus, p, view.id, active, audit_ctx=self._audit_context(context)
            )
        return view, replayed

    async def ResumeRun(self, request: pb.ResumeRunRequest, context: Any) -> pb.ResumeRunResponse:
        p = caller()
        named = request.client_run_id
        if named:
            await client_ids.check_resume(
                self.e.pool, p, named, request.run_id, request.interrupt_id
            )
        view, replayed = await resume.resume_run(
            self.e.pool,
            self.e.bus,
            p,
            request.run_id,
            request.interrupt_id,
            DECISION_IN.get(request.decision, ""),
            request.input,
            request.idempotency_key,
            inject_carrier(),
            audit_ctx=self._audit_context(context),
            value_json=request.value_json,
        )
        if named:
            await client_ids.name_run(self.e.pool, p, named, view, request.interrupt_id)
        return pb.ResumeRunResponse(run=convert.run_pb(view), replayed=replayed)

    async def GetRun(self, request: pb.GetRunRequest, context: Any) -> pb.GetRunResponse:
        p = caller()
        if request.client_run_id and not request.run_id:
            found = await client_ids.find_run(self.e.pool, p, request.client_run_id)
            return pb.GetRunResponse(
                run=convert.run_pb(found.run),
                answered_interrupt_id=found.answered_interrupt_id,
                client_conversation_id=found.client_conversation_id,
            )
        view = await runs_api.get_run(self.e.pool, p, request.run_id)
        return pb.GetRunResponse(run=convert.run_pb(view))

    async def GetRunPositions(
        self, request: pb.GetRunPositionsRequest, context: Any
    ) -> pb.GetRunPositionsResponse:
        positions = await runs_api.run_positions(self.e.pool, caller(), list(request.run_ids))
        return pb.GetRunPositionsResponse(last_sequences=positions)

    async def CancelRun(self, request: pb.CancelRunRequest, context: Any) -> pb.CancelRunResponse:
        p = caller()
        view = await resume.cancel_run(
            self.e.pool,
            self.e.bus,
            p,
            request.run_id,
            request.reason,
            audit_ctx=self._audit_context(context),
        )
        return pb.CancelRunResponse(run=convert.run_pb(view))

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: Any
    ) -> pb.ListAgentsResponse:
        p = caller()
        agents, default = runs_api.list_agents(self.e.agents, p)
        return pb.ListAgentsResponse(
            agents=[convert.agent_pb(a) for a in agents], default_agent=default
        )

    async def ListRuns(self, request: pb.ListRunsRequest, context: Any) -> pb.ListRunsResponse:
        p = caller()
        views, token = await run_listing.list_runs(
            self.e.pool,
            p,
            conversation_id=request.conversation_id,
            # An enum value this runtime does not know is refused, not read as "any".
            status=wire.RUN_STATUS.name.get(request.status, str(request.status))
            if request.status
            else "",
            agent=request.agent,
            user_id=request.user_id,
            since=timestamp(request.start_time, request.HasField("start_time"), "start_time"),
            until=timestamp(request.end_time, request.HasField("end_time"), "end_time"),
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return pb.ListRunsResponse(runs=[convert.run_pb(v) for v in views], next_page_token=token)

    async def ListAuditRecords(
        self, request: pb.ListAuditRecordsRequest, context: Any
    ) -> pb.ListAuditRecordsResponse:
        p = caller()
        rows, token = await audit_api.list_records(
            self.e.pool,
            p,
            timestamp(request.start_time, request.HasField("start_time"), "start_time"),
            timestamp(request.end_time, request.HasField("end_time"), "end_time"),
            request.actor,
            request.page_size,
            request.page_token,
        )
        return pb.ListAuditRecordsResponse(
            audit_records=[audit_api.record_pb(r) for r in rows], next_page_token=token
        )

    async def ListPendingApprovals(
        self, request: pb.ListPendingApprovalsRequest, context: Any
    ) -> pb.ListPendingApprovalsResponse:
        p = caller()
        found, token = await approvals_api.list_pending(
            self.e.pool, p, request.page_size, request.page_token
        )
        return pb.ListPendingApprovalsResponse(
            pending_approvals=[approvals_api.pending_pb(a) for a in found],
            next_page_token=token,
        )

    async def StreamRunEvents(
        self, request: pb.StreamRunEventsRequest, context: Any
    ) -> AsyncIterator[bytes]:
        """Yields the *encoded* StreamRunEventsResponse: stored events pass through as bytes."""
        after = max(request.after_sequence, 0)
        view = await self.stream.open(caller(), request.run_id, after)
        opened()
        async for item in _messages(self.stream.follow(view, after)):
            yield item

    async def StartRunAndStreamEvents(
        self, request: pb.StartRunAndStreamEventsRequest, context: Any
    ) -> AsyncIterator[bytes]:
        """StartRun, then the run's events from its first, on a subscription made before the run
        was queued. The first message also carries the run: a StartRunAndStreamEventsResponse
        encodes its events exactly as a StreamRunEventsResponse does, so batches pass through."""
        run_id = new_id("run")
        with self.stream.listen(run_id) as sub:
            streamed = runs_api.StreamedStart(asyncio.ensure_future(self.stream.bus.confirmed(sub)))
            try:
                view, replayed = await self._start(caller(), request, context, run_id, streamed)
            finally:
                streamed.ready.cancel()  # (a no-op once it answered)
            opened()
            head = pb.StartRunAndStreamEventsResponse(
                run=convert.run_pb(view), replayed=replayed
            ).SerializeToString()
            # A replayed start answers with the earlier run: it is followed as any other.
            items = (
                self.stream.follow_subscribed(sub, view, 0, first=streamed.first)
                if view.id == run_id
                else self.stream.follow(view, 0)
            )
            async for item in _messages(items):
                yield head + item if head else item
                head = b""


async def _messages(items: AsyncIterator[list[bytes] | bytes | RunView]) -> AsyncIterator[bytes]:
    """Each item of an event stream as one encoded message (a batch of events)."""
    async for item in items:
        if isinstance(item, bytes):
            yield item
        elif isinstance(item, RunView):
            reset = ev.reset(convert.run_pb(item)).SerializeToString()
            yield ev.batch_from_encoded([reset])
        else:
            yield ev.batch_from_encoded(item)


def register(server: grpc.aio.Server, servicer: RuntimeServicer) -> None:
    """Method handlers built from the service descriptor; the stream's serializer is the identity
    because it yields bytes already in wire form."""
    desc = pb.DESCRIPTOR.services_by_name["RuntimeService"]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for m in desc.methods:
        req_cls = getattr(pb, m.input_type.name)
        resp_cls = getattr(pb, m.output_type.name)
        fn = getattr(servicer, m.name)
        if m.server_streaming:
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                fn, request_deserializer=req_cls.FromString, response_serializer=lambda b: b
            )
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=req_cls.FromString,
                response_serializer=resp_cls.SerializeToString,
            )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(desc.full_name, handlers),)
    )
    # As the generated code does: registered methods each get their own pending accept in the
    # grpc.aio server, instead of all calls queueing for the one generic accept. (The typing
    # stubs do not know this grpcio >= 1.65 method yet.)
    server.add_registered_method_handlers(desc.full_name, handlers)  # type: ignore[attr-defined]
