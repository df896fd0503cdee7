"""A scripted stand-in for the runtime's gRPC API, for the gateway's unit tests only (the
integration tests in tests/integration run the real runtime)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from tether.runtime.v1 import events_pb2, resources_pb2, runtime_service_pb2_grpc
from tether.runtime.v1 import runtime_service_pb2 as rs

SECRET = "gateway-unit-test-secret-0123456789abcdef"


def status_error(code: int, reason: str, message: str) -> Any:
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="tether.dev"))
    return rpc_status.to_status(status_pb2.Status(code=code, message=message, details=[detail]))


def event(run_id: str, seq: int, **kind: Any) -> events_pb2.RunEvent:
    ev = events_pb2.RunEvent(run_id=run_id, sequence=seq)
    ev.time.GetCurrentTime()
    for name, value in kind.items():
        getattr(ev, name).CopyFrom(value)
    return ev


def delta(run_id: str, seq: int, text: str) -> events_pb2.RunEvent:
    return event(run_id, seq, text_delta=events_pb2.TextDelta(message_id="msg_1", delta=text))


def done(run_id: str, seq: int) -> events_pb2.RunEvent:
    return event(run_id, seq, done=events_pb2.Done(message_id="msg_1"))


AGENTS = [
    resources_pb2.Agent(
        name="billing",
        description="Refunds and invoices.",
        tools=[
            resources_pb2.AgentTool(
                name="refund",
                description="Refund a payment.",
                effect="write",
                action="payment.refund",
                risk="high",
            )
        ],
    ),
    resources_pb2.Agent(
        name="opspilot",
        description="The demo ops assistant.",
        tools=[resources_pb2.AgentTool(name="get_logs", description="Read logs.", effect="read")],
    ),
]


class FakeRuntime(runtime_service_pb2_grpc.RuntimeServiceServicer):
    def __init__(self) -> None:
        self.runs: dict[str, resources_pb2.Run] = {}
        self.log: dict[str, list[events_pb2.RunEvent]] = {}
        self.live: dict[str, list[asyncio.Queue[events_pb2.RunEvent | None]]] = {}
        self.stream_calls: list[tuple[str, int]] = []
        self.tokens: list[str] = []
        self.on_behalf: list[str] = []  # each call's x-tether-on-behalf-of ("" when none)
        self.fail_next_stream_after: int | None = None
        # What StartRun / StartRunAndStreamEvents / ResumeRun received, in order.
        self.starts: list[tuple[str, str]] = []  # (method, agent)
        self.resumes: list[rs.ResumeRunRequest] = []
        self.start_inputs: list[tuple[str, str]] = []  # (text, input_json) of each start

    def add_run(self, run_id: str, status: int = resources_pb2.RUN_STATUS_RUNNING) -> None:
        self.runs[run_id] = resources_pb2.Run(id=run_id, status=status, conversation_id="conv_1")
        self.log[run_id] = []
        self.live[run_id] = []

    def append(self, ev: events_pb2.RunEvent) -> None:
        self.log[ev.run_id].append(ev)
        run = self.runs[ev.run_id]
        run.last_sequence = ev.sequence
        if ev.WhichOneof("event") == "done":
            run.status = resources_pb2.RUN_STATUS_COMPLETED
        for q in self.live[ev.run_id]:
            q.put_nowait(ev)

    def _auth(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        md = dict(context.invocation_metadata() or ())
        self.tokens.append(str(md.get("authorization", "")))
        self.on_behalf.append(str(md.get("x-tether-on-behalf-of", "")))

    async def GetRun(self, request: rs.GetRunRequest, context: Any) -> rs.GetRunResponse:
        self._auth(context)
        run = self.runs.get(request.run_id)
        if run is None:
            await context.abort_with_status(
                status_error(code_pb2.NOT_FOUND, "RUN_NOT_FOUND", "run not found")
            )
        return rs.GetRunResponse(run=run)

    async def CreateConversation(self, request: Any, context: Any) -> Any:
        await context.abort_with_status(
            status_error(code_pb2.PERMISSION_DENIED, "PERMISSION_DENIED", "not for you")
        )

    async def ListAgents(self, request: rs.ListAgentsRequest, context: Any) -> Any:
        self._auth(context)
        return rs.ListAgentsResponse(agents=AGENTS, default_agent="opspilot")

    async def _known_agent(self, agent: str, context: Any) -> None:
        if agent and agent not in {a.name for a in AGENTS}:
            await context.abort_with_status(
                status_error(
                    code_pb2.INVALID_ARGUMENT, "AGENT_NOT_FOUND", f"unknown agent {agent!r}"
                )
            )

    def _new_run(self, agent: str) -> resources_pb2.Run:
        run_id = f"run_s{len(self.runs) + 1}"
        self.add_run(run_id)
        self.runs[run_id].agent = agent or "opspilot"
        return self.runs[run_id]

    async def StartRun(self, request: rs.StartRunRequest, context: Any) -> rs.StartRunResponse:
        self._auth(context)
        self.starts.append(("StartRun", request.agent))
        self.start_inputs.append((request.text, request.input_json))
        await self._known_agent(request.agent, context)
        return rs.StartRunResponse(run=self._new_run(request.agent))

    async def StartRunAndStreamEvents(
        self, request: rs.StartRunAndStreamEventsRequest, context: Any
    ) -> Any:
        self._auth(context)
        self.starts.append(("StartRunAndStreamEvents", request.agent))
        self.start_inputs.append((request.text, request.input_json))
        await self._known_agent(request.agent, context)
        run = self._new_run(request.agent)
        self.append(done(run.id, 1))
        yield rs.StartRunAndStreamEventsResponse(run=run, events=self.log[run.id])

    async def ResumeRun(self, request: rs.ResumeRunRequest, context: Any) -> Any:
        self._auth(context)
        self.resumes.append(request)
        run = self.runs.get(request.run_id) or resources_pb2.Run(id=request.run_id)
        return rs.ResumeRunResponse(run=run)

    async def StreamRunEvents(self, request: rs.StreamRunEventsRequest, context: Any) -> Any:
        self._auth(context)
        self.stream_calls.append((request.run_id, request.after_sequence))
        run_id, after = request.run_id, request.after_sequence
        run = self.runs[run_id]
        queue: asyncio.Queue[events_pb2.RunEvent | None] = asyncio.Queue()
        self.live[run_id].append(queue)
        try:
            if after > run.last_sequence:
                yield rs.StreamRunEventsResponse(
                    events=[events_pb2.RunEvent(run_id=run_id, reset=events_pb2.Reset(run=run))]
                )
                after = run.last_sequence
            backlog = [e for e in self.log[run_id] if e.sequence > after]
            if backlog:
                yield rs.StreamRunEventsResponse(events=backlog)
                after = backlog[-1].sequence
                if backlog[-1].WhichOneof("event") == "done":
                    return
            while True:
                ev = await queue.get()
                if ev is None or ev.sequence <= after:
                    continue
                fail_after = self.fail_next_stream_after
                if fail_after is not None and ev.sequence > fail_after:
                    self.fail_next_stream_after = None
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "pod going away")
                yield rs.StreamRunEventsResponse(events=[ev])
                after = ev.sequence
                if ev.WhichOneof("event") == "done":
                    return
        finally:
            self.live[run_id].remove(queue)


async def serve(fake: FakeRuntime) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    runtime_service_pb2_grpc.add_RuntimeServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"
