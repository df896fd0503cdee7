"""Every request message of RuntimeService, built field by field from its descriptor
(tether_testkit.proto_strategies) and sent to a live runtime over a real channel, with valid,
missing and broken credentials (tether_testkit.grpc_metadata): every answer is OK or a status
the caller caused, never INTERNAL or UNKNOWN. Streams are read up to their first message."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, MethodDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1 import runtime_service_pb2_grpc
from tether_testkit.grpc_metadata import Metadata, metadata
from tether_testkit.processes import Proc
from tether_testkit.proto_strategies import MessageStrategies
from tether_testkit.security import bearer, new_user

SERVICE = pb.DESCRIPTOR.services_by_name["RuntimeService"]
# Examples per RPC, explicit: a new RPC fails test_every_rpc_is_fuzzed until it gets a count.
# Starting runs costs the runtime real work, so those get fewer. The whole file runs in ~40 s.
MAX_EXAMPLES = {
    "CreateConversation": 60,
    "GetConversation": 60,
    "ListConversations": 80,
    "DeleteConversation": 60,
    "ListMessages": 80,
    "StartRun": 40,
    "ResumeRun": 80,
    "GetRun": 60,
    "GetRunPositions": 60,
    "CancelRun": 60,
    "StreamRunEvents": 50,
    "StartRunAndStreamEvents": 30,
    "ListAgents": 30,
    "ListRuns": 100,
    "ListAuditRecords": 100,
    "ListPendingApprovals": 30,
}
# What a caller's own request may get back (the service's documented errors) besides OK.
CLIENT_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.ABORTED,
}
UNARY_TIMEOUT_S = 10.0
FIRST_MESSAGE_TIMEOUT_S = 0.5  # a valid stream that has nothing to say yet: DEADLINE_EXCEEDED


@dataclass(frozen=True)
class Target:
    """The live runtime, a user of the fuzz's own and real ids of theirs and of another user."""

    channel: grpc.Channel
    stub: runtime_service_pb2_grpc.RuntimeServiceStub
    user: str
    ids: dict[str, list[str]]


@pytest.fixture
def target(runtime: Proc) -> Iterator[Target]:
    channel = grpc.insecure_channel(runtime.addr)
    stub = runtime_service_pb2_grpc.RuntimeServiceStub(channel)
    user, other = new_user("gfuzz"), new_user("gother")
    ids: dict[str, list[str]] = {"conversation_id": [], "run_id": []}
    for owner in (user, other):
        md = tuple((k.lower(), v) for k, v in bearer(owner).items())
        conv = stub.CreateConversation(pb.CreateConversationRequest(title="fuzz"), metadata=md)
        started = stub.StartRun(
            pb.StartRunRequest(conversation_id=conv.conversation.id, text="hello"), metadata=md
        )
        ids["conversation_id"].append(conv.conversation.id)
        ids["run_id"].append(started.run.id)
    yield Target(channel, stub, user, ids)
    channel.close()


def call(target: Target, method: MethodDescriptor, request: Message, md: Metadata) -> str:
    """The status name of the call's answer (the first message's, for a stream)."""
    rpc = getattr(target.stub, method.name)
    try:
        if method.server_streaming:
            stream = rpc(request, metadata=md, timeout=FIRST_MESSAGE_TIMEOUT_S)
            try:
                next(stream, None)
            finally:
                stream.cancel()
        else:
            rpc(request, metadata=md, timeout=UNARY_TIMEOUT_S)
    except grpc.RpcError as err:
        code = err.code()  # type: ignore[attr-defined]
        if code in CLIENT_ERRORS:
            return str(code.name)
        if method.server_streaming and code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return str(code.name)
        raise AssertionError(
            f"{method.name} answered {code.name}: {err.details()}\n"  # type: ignore[attr-defined]
            f"request: {request!r:.2000}\nmetadata: {md!r:.500}"
        ) from None
    return "OK"


def test_every_rpc_is_fuzzed() -> None:
    assert sorted(MAX_EXAMPLES) == sorted(m.name for m in SERVICE.methods)
    assert not any(m.client_streaming for m in SERVICE.methods), "client streams need a driver"


@pytest.mark.parametrize("name", sorted(MAX_EXAMPLES))
def test_rpc_fuzz(target: Target, name: str) -> None:
    method = SERVICE.methods_by_name[name]
    requests = MessageStrategies(target.ids).message(method.input_type)
    answers: Counter[str] = Counter()

    @settings(
        max_examples=MAX_EXAMPLES[name],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(request=requests, md=metadata(target.user))
    def fuzz(request: Message, md: Metadata) -> None:
        answers[call(target, method, request, md)] += 1

    fuzz()
    print(f"{name}: {sum(answers.values())} calls, {dict(answers)}")
    assert sum(answers.values()) >= MAX_EXAMPLES[name]
    # The credentials reached the handler, and the handler answered some requests.
    assert set(answers) - {"UNAUTHENTICATED"}, (name, answers)
    # The runtime survived it: a plain call still answers.
    md = tuple((k.lower(), v) for k, v in bearer(target.user).items())
    target.stub.ListAgents(pb.ListAgentsRequest(), metadata=md, timeout=UNARY_TIMEOUT_S)


def fields_set(desc: Descriptor) -> set[str]:
    seen: set[str] = set()

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(request=MessageStrategies().message(desc))
    def collect(request: Message) -> None:
        seen.update(f.name for f, _ in request.ListFields())

    collect()
    return seen


def test_strategies_reach_every_field() -> None:
    """The builder sets every field of every request at least sometimes (no field forgotten)."""
    for method in SERVICE.methods:
        fields = {f.name for f in method.input_type.fields}
        assert fields_set(method.input_type) == fields, method.name


def test_unknown_enum_values_are_sent() -> None:
    """An open proto3 enum carries numbers it does not name; the fuzz sends them."""
    desc = pb.ListRunsRequest.DESCRIPTOR
    values: set[int] = set()

    @settings(max_examples=200, derandomize=True, database=None, deadline=None)
    @given(request=MessageStrategies().message(desc))
    def collect(request: Message) -> None:
        values.add(request.status)  # type: ignore[attr-defined]

    collect()
    known = {v.number for v in desc.fields_by_name["status"].enum_type.values}
    assert values - known, values


def test_far_timestamps_are_sent() -> None:
    desc = pb.ListAuditRecordsRequest.DESCRIPTOR
    seconds: set[int] = set()

    @settings(max_examples=200, derandomize=True, database=None, deadline=None)
    @given(request=MessageStrategies().message(desc))
    def collect(request: Message) -> None:
        seconds.add(request.start_time.seconds)  # type: ignore[attr-defined]

    collect()
    assert 2**40 in seconds and max(seconds) > 253_402_300_799, sorted(seconds)[-5:]
