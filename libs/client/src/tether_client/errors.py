"""Exceptions for every failure the runtime reports, chosen by the `ErrorInfo` reason it sends.

The runtime answers a refused call with a gRPC status whose details carry a `google.rpc.ErrorInfo`
(domain "tether.dev", a stable `reason` such as RUN_NOT_FOUND). `from_rpc_error` turns that into
the matching subclass of `TetherError`. A reason this version does not know falls back to the
class of its gRPC code (plain `TetherError` for an unusual code) with the reason kept; a status
without details (the channel's own: connection refused, deadline passed) is mapped by its code
alone, its reason then being the code's name.

Catch the broad classes (`NotFound`, `FailedPrecondition`) to handle a family, or the precise
ones (`RunNotFound`, `InterruptAlreadyResolved`) for one case."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

ERROR_DOMAIN = "tether.dev"
_DETAILS_KEY = "grpc-status-details-bin"


class TetherError(Exception):
    """A failed call. `reason` is the stable machine-readable code (the ErrorInfo reason, or the
    gRPC code's name when the runtime sent none), `message` is for a person, `code` the gRPC
    status code."""

    default_reason = "INTERNAL"
    default_code = grpc.StatusCode.INTERNAL

    def __init__(
        self,
        message: str = "",
        *,
        reason: str | None = None,
        code: grpc.StatusCode | None = None,
    ) -> None:
        self.reason = reason or self.default_reason
        self.message = message or self.reason.lower().replace("_", " ")
        self.code = code or self.default_code
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class InvalidArgument(TetherError):
    default_reason, default_code = "INVALID_ARGUMENT", grpc.StatusCode.INVALID_ARGUMENT


class InvalidAnswer(InvalidArgument):
    """An answer that does not fit its interrupt (an option not offered, a fill against its
    schema, a decision of the wrong kind): nothing changed."""

    default_reason = "INVALID_ANSWER"


class AgentNotFound(InvalidArgument):
    """The run names an agent the runtime has not loaded (`list_agents` names those it has)."""

    default_reason = "AGENT_NOT_FOUND"


class Unauthenticated(TetherError):
    default_reason, default_code = "UNAUTHENTICATED", grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(TetherError):
    """The caller may not do this: no grant for the action, or a stream token that may only read."""

    default_reason, default_code = "PERMISSION_DENIED", grpc.StatusCode.PERMISSION_DENIED


class NotFound(TetherError):
    """Missing, or another user's (the runtime does not tell the two apart)."""

    default_reason, default_code = "NOT_FOUND", grpc.StatusCode.NOT_FOUND


class RunNotFound(NotFound):
    default_reason = "RUN_NOT_FOUND"


class ConversationNotFound(NotFound):
    default_reason = "CONVERSATION_NOT_FOUND"


class InterruptNotFound(NotFound):
    default_reason = "INTERRUPT_NOT_FOUND"


class FailedPrecondition(TetherError):
    default_reason, default_code = "FAILED_PRECONDITION", grpc.StatusCode.FAILED_PRECONDITION


class InterruptAlreadyResolved(FailedPrecondition):
    """Someone (or something: a cancel) decided this interrupt first, with another decision."""

    default_reason = "INTERRUPT_ALREADY_RESOLVED"


class InterruptExpired(FailedPrecondition):
    default_reason = "INTERRUPT_EXPIRED"


class RunNotCancellable(FailedPrecondition):
    """The run already completed or failed."""

    default_reason = "RUN_NOT_CANCELLABLE"


class RunActive(FailedPrecondition):
    """The conversation has an active run and its agent rejects a second message meanwhile; the
    active run's id is in the error's metadata (`activeRunId`)."""

    default_reason = "RUN_ACTIVE"


class ApprovalAlreadyGiven(FailedPrecondition):
    """This approver already approved this card (a two-person approval needs someone else)."""

    default_reason = "APPROVAL_ALREADY_GIVEN"


class SelfApprovalForbidden(PermissionDenied):
    """The tool's approval policy does not let the requester approve their own request."""

    default_reason = "SELF_APPROVAL_FORBIDDEN"


class IdempotencyKeyReused(TetherError):
    """The idempotency key was used before by this caller for a different request."""

    default_reason, default_code = "IDEMPOTENCY_KEY_REUSED", grpc.StatusCode.ALREADY_EXISTS


class ClientIdTaken(TetherError):
    """A client id for a run (StartRun / ResumeRun `client_run_id`) already names another."""

    default_reason, default_code = "CLIENT_ID_TAKEN", grpc.StatusCode.ALREADY_EXISTS


class RateLimited(TetherError):
    default_reason, default_code = "RATE_LIMITED", grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(TetherError):
    """The runtime (or its store) could not be reached; retrying later may succeed. The client
    has already retried what was safe to retry before raising this."""

    default_reason, default_code = "UNAVAILABLE", grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(TetherError):
    """The call's deadline passed. It may still have taken effect: repeat it with the same
    idempotency key to learn its answer."""

    default_reason, default_code = "DEADLINE_EXCEEDED", grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(TetherError):
    default_reason, default_code = "CANCELLED", grpc.StatusCode.CANCELLED


class Internal(TetherError):
    default_reason, default_code = "INTERNAL", grpc.StatusCode.INTERNAL


ERRORS_BY_REASON: dict[str, type[TetherError]] = {
    cls.default_reason: cls
    for cls in (
        InvalidArgument,
        InvalidAnswer,
        AgentNotFound,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        RunNotFound,
        ConversationNotFound,
        InterruptNotFound,
        FailedPrecondition,
        InterruptAlreadyResolved,
        InterruptExpired,
        RunNotCancellable,
        RunActive,
        ApprovalAlreadyGiven,
        SelfApprovalForbidden,
        IdempotencyKeyReused,
        ClientIdTaken,
        RateLimited,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Internal,
    )
}

# A status without a reason (or with one this version does not know) by its code.
_ERRORS_BY_CODE: dict[grpc.StatusCode, type[TetherError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RateLimited,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
}


def _rpc_status_classes() -> tuple[Any, Any]:
    """google.rpc.Status and ErrorInfo, wire-compatible, in a private descriptor pool: the client
    depends on protobuf alone (not googleapis-common-protos), and a private pool never clashes
    with the real definitions when those are installed too."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tether_client/_rpc_status.proto", package="tether_client.rpc", syntax="proto3"
    )
    f = descriptor_pb2.FieldDescriptorProto
    status = fdp.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    status.field.add(name="message", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    # google.protobuf.Any on the wire; parsed with any_pb2 one by one.
    status.field.add(name="details", number=3, type=f.TYPE_BYTES, label=f.LABEL_REPEATED)
    info = fdp.message_type.add(name="ErrorInfo")
    info.field.add(name="reason", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    info.field.add(name="domain", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("tether_client.rpc.Status")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("tether_client.rpc.ErrorInfo")),
    )


_Status, _ErrorInfo = _rpc_status_classes()


def reason_of(err: grpc.aio.AioRpcError | grpc.RpcError) -> str | None:
    """The ErrorInfo reason from the trailing `grpc-status-details-bin`, if the server sent one."""
    trailing = getattr(err, "trailing_metadata", None)
    metadata = (trailing() if callable(trailing) else None) or ()
    for key, value in metadata:
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = _Status.FromString(value)
            for raw in status.details:
                detail = any_pb2.Any.FromString(raw)
                if detail.type_url.rsplit("/", 1)[-1] == "google.rpc.ErrorInfo":
                    reason = str(_ErrorInfo.FromString(detail.value).reason)
                    return reason or None
        except Exception:  # noqa: BLE001 - a malformed detail is just no detail
            return None
    return None


def from_rpc_error(err: grpc.aio.AioRpcError) -> TetherError:
    """The TetherError for a failed call: by ErrorInfo reason, else by gRPC code."""
    code = err.code()
    reason = reason_of(err)
    cls = ERRORS_BY_REASON.get(reason or "")
    if cls is None:
        cls = _ERRORS_BY_CODE.get(code, TetherError)
        # No reason (or an unknown one): the code's own name unless the class is exactly it.
        reason = reason or (cls.default_reason if cls.default_code == code else code.name)
    return cls(err.details() or "", reason=reason, code=code)
