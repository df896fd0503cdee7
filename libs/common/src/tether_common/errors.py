"""One error hierarchy for the whole system; each boundary maps `reason` to its own status."""

from __future__ import annotations


class TetherError(Exception):
    """A failure a caller can act on. `reason` is the stable, machine-readable code."""

    reason = "INTERNAL"
    metadata: dict[str, str] = {}  # noqa: RUF012 - never mutated; ErrorInfo metadata when set

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.reason


class InvalidArgument(TetherError):
    reason = "INVALID_ARGUMENT"


class AgentNotFound(TetherError):
    """A run names an agent the runtime has not loaded (never a silent fallback to another)."""

    reason = "AGENT_NOT_FOUND"


class Unauthenticated(TetherError):
    reason = "UNAUTHENTICATED"


class PermissionDenied(TetherError):
    reason = "PERMISSION_DENIED"


class NotFound(TetherError):
    reason = "NOT_FOUND"


class AlreadyResolved(TetherError):
    reason = "INTERRUPT_ALREADY_RESOLVED"


class Expired(TetherError):
    reason = "INTERRUPT_EXPIRED"


class IdempotencyKeyReused(TetherError):
    reason = "IDEMPOTENCY_KEY_REUSED"


class ClientIdTaken(TetherError):
    """A caller's own id for a run (AG-UI's `runId`) that already names something else."""

    reason = "CLIENT_ID_TAKEN"


class FailedPrecondition(TetherError):
    reason = "FAILED_PRECONDITION"


class RunActive(FailedPrecondition):
    """A message to an agent whose `concurrent_runs` is "reject", while a run of the
    conversation is active; `metadata` names it (ErrorInfo metadata, lowerCamelCase keys)."""

    reason = "RUN_ACTIVE"

    def __init__(self, message: str, *, active_run_id: str) -> None:
        super().__init__(message)
        self.metadata = {"activeRunId": active_run_id}


class RateLimited(TetherError):
    reason = "RATE_LIMITED"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(TetherError):
    reason = "UNAVAILABLE"


class UnsafeSettings(TetherError):
    """Raised at start-up in production when a setting would break a guarantee."""

    reason = "UNSAFE_SETTINGS"


# reason -> (gRPC status code name, HTTP status). The one table both boundaries use.
STATUS_BY_REASON: dict[str, tuple[str, int]] = {
    "INVALID_ARGUMENT": ("INVALID_ARGUMENT", 400),
    # A request naming an unknown agent is bad input, not a missing resource of the caller's.
    "AGENT_NOT_FOUND": ("INVALID_ARGUMENT", 400),
    # An answer of the wrong kind for its interrupt (DESIGN section 10): refused, nothing changed.
    "INVALID_ANSWER": ("INVALID_ARGUMENT", 422),
    "UNAUTHENTICATED": ("UNAUTHENTICATED", 401),
    "PERMISSION_DENIED": ("PERMISSION_DENIED", 403),
    # An approval policy that needs someone other than the requester (DESIGN "Approvals").
    "SELF_APPROVAL_FORBIDDEN": ("PERMISSION_DENIED", 403),
    "NOT_FOUND": ("NOT_FOUND", 404),
    "RUN_NOT_FOUND": ("NOT_FOUND", 404),
    "CONVERSATION_NOT_FOUND": ("NOT_FOUND", 404),
    "INTERRUPT_NOT_FOUND": ("NOT_FOUND", 404),
    "INTERRUPT_ALREADY_RESOLVED": ("FAILED_PRECONDITION", 409),
    "RUN_NOT_CANCELLABLE": ("FAILED_PRECONDITION", 409),
    # A person approving a two-person card a second time: it waits for someone else.
    "APPROVAL_ALREADY_GIVEN": ("FAILED_PRECONDITION", 409),
    "FAILED_PRECONDITION": ("FAILED_PRECONDITION", 409),
    "RUN_ACTIVE": ("FAILED_PRECONDITION", 409),
    "INTERRUPT_EXPIRED": ("FAILED_PRECONDITION", 410),
    "IDEMPOTENCY_KEY_REUSED": ("ALREADY_EXISTS", 422),
    "CLIENT_ID_TAKEN": ("ALREADY_EXISTS", 409),
    "RATE_LIMITED": ("RESOURCE_EXHAUSTED", 429),
    "UNAVAILABLE": ("UNAVAILABLE", 503),
    "INTERNAL": ("INTERNAL", 500),
}

ERROR_DOMAIN = "tether.dev"


def error_for_reason(reason: str, message: str) -> TetherError:
    """Rebuild a TetherError on the far side of a boundary (e.g. the gateway reading ErrorInfo)."""
    return TetherError(message, reason=reason)
