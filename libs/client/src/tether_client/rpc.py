"""RuntimeService's methods with types (the generated gRPC stub has none): one raw call each,
no retry and no error mapping, for callers that bring their own policy (the gateway forwards
each browser's token and maps `grpc.aio.AioRpcError` to HTTP itself). `TetherClient` is built
on it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias, TypeVar

import grpc
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1 import runtime_service_pb2_grpc

Metadata: TypeAlias = Sequence[tuple[str, str]]
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Unary: TypeAlias = grpc.aio.UnaryUnaryCall[Req, Resp]
EventCall: TypeAlias = grpc.aio.UnaryStreamCall[
    pb.StreamRunEventsRequest, pb.StreamRunEventsResponse
]
StartStreamCall: TypeAlias = grpc.aio.UnaryStreamCall[
    pb.StartRunAndStreamEventsRequest, pb.StartRunAndStreamEventsResponse
]
# What a stream's read() returns at its end (the typing stubs do not name it).
EOF_MARK: Any = grpc.aio.EOF  # type: ignore[attr-defined]


class RuntimeApi:
    """Typed calls of tether.runtime.v1.RuntimeService on one channel. A unary method returns
    the call (await it for the response); `timeout` is its gRPC deadline in seconds."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub: Any = runtime_service_pb2_grpc.RuntimeServiceStub(channel)  # type: ignore[no-untyped-call]

    def create_conversation(
        self, request: pb.CreateConversationRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.CreateConversationRequest, pb.CreateConversationResponse]:
        call: Unary[pb.CreateConversationRequest, pb.CreateConversationResponse] = (
            self._stub.CreateConversation(request, metadata=metadata, timeout=timeout)
        )
        return call

    def get_conversation(
        self, request: pb.GetConversationRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.GetConversationRequest, pb.GetConversationResponse]:
        call: Unary[pb.GetConversationRequest, pb.GetConversationResponse] = (
            self._stub.GetConversation(request, metadata=metadata, timeout=timeout)
        )
        return call

    def delete_conversation(
        self, request: pb.DeleteConversationRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.DeleteConversationRequest, pb.DeleteConversationResponse]:
        call: Unary[pb.DeleteConversationRequest, pb.DeleteConversationResponse] = (
            self._stub.DeleteConversation(request, metadata=metadata, timeout=timeout)
        )
        return call

    def list_conversations(
        self, request: pb.ListConversationsRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.ListConversationsRequest, pb.ListConversationsResponse]:
        call: Unary[pb.ListConversationsRequest, pb.ListConversationsResponse] = (
            self._stub.ListConversations(request, metadata=metadata, timeout=timeout)
        )
        return call

    def list_messages(
        self, request: pb.ListMessagesRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.ListMessagesRequest, pb.ListMessagesResponse]:
        call: Unary[pb.ListMessagesRequest, pb.ListMessagesResponse] = self._stub.ListMessages(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def start_run(
        self, request: pb.StartRunRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.StartRunRequest, pb.StartRunResponse]:
        call: Unary[pb.StartRunRequest, pb.StartRunResponse] = self._stub.StartRun(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def resume_run(
        self, request: pb.ResumeRunRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.ResumeRunRequest, pb.ResumeRunResponse]:
        call: Unary[pb.ResumeRunRequest, pb.ResumeRunResponse] = self._stub.ResumeRun(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def get_run(
        self, request: pb.GetRunRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.GetRunRequest, pb.GetRunResponse]:
        call: Unary[pb.GetRunRequest, pb.GetRunResponse] = self._stub.GetRun(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def get_run_positions(
        self, request: pb.GetRunPositionsRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.GetRunPositionsRequest, pb.GetRunPositionsResponse]:
        call: Unary[pb.GetRunPositionsRequest, pb.GetRunPositionsResponse] = (
            self._stub.GetRunPositions(request, metadata=metadata, timeout=timeout)
        )
        return call

    def cancel_run(
        self, request: pb.CancelRunRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.CancelRunRequest, pb.CancelRunResponse]:
        call: Unary[pb.CancelRunRequest, pb.CancelRunResponse] = self._stub.CancelRun(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def list_runs(
        self, request: pb.ListRunsRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.ListRunsRequest, pb.ListRunsResponse]:
        call: Unary[pb.ListRunsRequest, pb.ListRunsResponse] = self._stub.ListRuns(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def list_audit_records(
        self, request: pb.ListAuditRecordsRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.ListAuditRecordsRequest, pb.ListAuditRecordsResponse]:
        call: Unary[pb.ListAuditRecordsRequest, pb.ListAuditRecordsResponse] = (
            self._stub.ListAuditRecords(request, metadata=metadata, timeout=timeout)
        )
        return call

    def list_pending_approvals(
        self,
        request: pb.ListPendingApprovalsRequest,
        *,
        metadata: Metadata,
        timeout: float | None,
    ) -> Unary[pb.ListPendingApprovalsRequest, pb.ListPendingApprovalsResponse]:
        call: Unary[pb.ListPendingApprovalsRequest, pb.ListPendingApprovalsResponse] = (
            self._stub.ListPendingApprovals(request, metadata=metadata, timeout=timeout)
        )
        return call

    def list_agents(
        self, request: pb.ListAgentsRequest, *, metadata: Metadata, timeout: float | None
    ) -> Unary[pb.ListAgentsRequest, pb.ListAgentsResponse]:
        call: Unary[pb.ListAgentsRequest, pb.ListAgentsResponse] = self._stub.ListAgents(
            request, metadata=metadata, timeout=timeout
        )
        return call

    def stream_run_events(
        self, request: pb.StreamRunEventsRequest, *, metadata: Metadata
    ) -> EventCall:
        """No deadline: the stream lives as long as the run; keepalive detects a dead peer."""
        call: EventCall = self._stub.StreamRunEvents(request, metadata=metadata)
        return call

    def start_run_and_stream_events(
        self, request: pb.StartRunAndStreamEventsRequest, *, metadata: Metadata
    ) -> StartStreamCall:
        call: StartStreamCall = self._stub.StartRunAndStreamEvents(request, metadata=metadata)
        return call
