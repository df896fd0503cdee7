"""Tether's Python client: runs, resumable event streams, approvals and typed errors over gRPC.

    from tether_client import TetherClient

The messages it returns are the generated protobuf classes of `tether.runtime.v1` (shipped in
this distribution): `Run`, `Conversation`, `RunEvent`, ... Events are `RunEvent` messages; use
`event.WhichOneof("event")` (or `event_kind(event)`) to tell them apart."""

from tether.runtime.v1.events_pb2 import RunEvent
from tether.runtime.v1.resources_pb2 import Conversation, Interrupt, Run

from tether_client.channel import (
    channel_options,
    channel_target,
    open_channel,
    tls_credentials,
    tls_from_env,
)
from tether_client.client import TetherClient, decision_key
from tether_client.errors import (
    AgentNotFound,
    ApprovalAlreadyGiven,
    Cancelled,
    ClientIdTaken,
    ConversationNotFound,
    DeadlineExceeded,
    FailedPrecondition,
    IdempotencyKeyReused,
    Internal,
    InterruptAlreadyResolved,
    InterruptExpired,
    InterruptNotFound,
    InvalidAnswer,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    RateLimited,
    RunActive,
    RunNotCancellable,
    RunNotFound,
    SelfApprovalForbidden,
    TetherError,
    Unauthenticated,
    Unavailable,
)
from tether_client.retry import RetryPolicy
from tether_client.rpc import RuntimeApi
from tether_client.stream import EventStream, event_kind, is_terminal
from tether_client.sync import TetherClientSync

__all__ = [
    "AgentNotFound",
    "Cancelled",
    "Conversation",
    "ConversationNotFound",
    "DeadlineExceeded",
    "EventStream",
    "FailedPrecondition",
    "ClientIdTaken",
    "IdempotencyKeyReused",
    "Internal",
    "Interrupt",
    "InterruptAlreadyResolved",
    "InterruptExpired",
    "InterruptNotFound",
    "InvalidAnswer",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "RateLimited",
    "RetryPolicy",
    "Run",
    "RunEvent",
    "RunNotCancellable",
    "RunActive",
    "ApprovalAlreadyGiven",
    "SelfApprovalForbidden",
    "RunNotFound",
    "RuntimeApi",
    "TetherClient",
    "TetherClientSync",
    "TetherError",
    "Unauthenticated",
    "Unavailable",
    "channel_options",
    "channel_target",
    "decision_key",
    "event_kind",
    "is_terminal",
    "open_channel",
    "tls_credentials",
    "tls_from_env",
]
