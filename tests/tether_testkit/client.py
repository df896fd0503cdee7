"""A small gRPC client for tests: what an internal service would write."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import grpc
from tether.runtime.v1 import events_pb2, runtime_service_pb2_grpc
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_client.errors import reason_of
from tether_common.auth import issue_token
from tether_common.event_json import event_type


def token(secret: str, user: str, **kw: object) -> str:
    return issue_token(secret, user, **kw)  # type: ignore[arg-type]


@dataclass
class Client:
    addr: str
    token: str
    channel: grpc.aio.Channel = field(init=False)
    stub: runtime_service_pb2_grpc.RuntimeServiceStub = field(init=False)

    def __post_init__(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.addr)
        self.stub = runtime_service_pb2_grpc.RuntimeServiceStub(self.channel)

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)

    async def close(self) -> None:
        await self.channel.close()

    async def conversation(self, title: str = "test") -> str:
        r = await self.stub.CreateConversation(
            pb.CreateConversationRequest(title=title), metadata=self.md, timeout=10
        )
        return str(r.conversation.id)

    async def start(
        self, conv: str, text: str, key: str = "", *, agent: str = ""
    ) -> pb.StartRunResponse:
        return await self.stub.StartRun(
            pb.StartRunRequest(conversation_id=conv, text=text, idempotency_key=key, agent=agent),
            metadata=self.md,
            timeout=10,
        )

    async def start_streaming(
        self, conv: str, text: str, key: str = "", *, timeout: float = 30
    ) -> tuple[pb.StartRunAndStreamEventsResponse, list[events_pb2.RunEvent]]:
        """StartRunAndStreamEvents to its end: (the first message, every event streamed)."""
        call = self.stub.StartRunAndStreamEvents(
            pb.StartRunAndStreamEventsRequest(conversation_id=conv, text=text, idempotency_key=key),
            metadata=self.md,
            timeout=timeout,
        )
        first: pb.StartRunAndStreamEventsResponse | None = None
        out: list[events_pb2.RunEvent] = []
        async for resp in call:
            first = first or resp
            out.extend(resp.events)
        assert first is not None, "the stream ended without a message"
        return first, out

    async def resume(
        self,
        run_id: str,
        interrupt_id: str,
        decision: int = events_pb2.DECISION_APPROVED,
        key: str | None = None,
    ) -> pb.ResumeRunResponse:
        return await self.stub.ResumeRun(
            pb.ResumeRunRequest(
                run_id=run_id,
                interrupt_id=interrupt_id,
                decision=decision,
                idempotency_key=key or uuid.uuid4().hex,
            ),
            metadata=self.md,
            timeout=10,
        )

    async def events(
        self, run_id: str, after: int = 0, *, until: str | None = None, timeout: float = 30
    ) -> list[events_pb2.RunEvent]:
        """Read the stream until it ends (terminal event) or until an event of type `until`."""
        out: list[events_pb2.RunEvent] = []
        call = self.stub.StreamRunEvents(
            pb.StreamRunEventsRequest(run_id=run_id, after_sequence=after),
            metadata=self.md,
            timeout=timeout,
        )
        async for resp in call:
            for e in resp.events:
                out.append(e)
                if until is not None and event_type(e) == until:
                    call.cancel()
                    return out
        return out


def types(evs: list[events_pb2.RunEvent]) -> list[str]:
    return [event_type(e) for e in evs]


def assert_dense(evs: list[events_pb2.RunEvent], start: int = 1) -> None:
    seqs = [e.sequence for e in evs if event_type(e) != "reset"]
    assert seqs == list(range(start, start + len(seqs))), f"not dense: {seqs}"


def reason(err: grpc.aio.AioRpcError) -> str:
    """The ErrorInfo reason carried in the status details."""
    return reason_of(err) or ""
