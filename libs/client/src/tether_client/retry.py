"""When the client retries, and how long it waits between tries.

Retried on their own: unary calls that are safe to repeat (reads; `start` and `resume`, whose
idempotency key makes a repeat return the first answer; `cancel`, which is the same done twice)
when the runtime is UNAVAILABLE; and event streams, which reopen after UNAVAILABLE, a dropped
connection, a pod going away (GOAWAY, SIGKILL) or an end without the terminal event.
`create_conversation` has no key, so it is never repeated."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from tether_client.errors import reason_of


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter. `attempts` bounds a unary call's tries in all;
    `stream_attempts` bounds a stream's reopenings in a row without an event in between (any
    event received starts the count again)."""

    attempts: int = 5
    stream_attempts: int = 12
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 3.0
    multiplier: float = 2.0

    def backoff(self, failures: int) -> float:
        """The wait before try number `failures + 1` (failures >= 1)."""
        ceiling = min(
            self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (failures - 1)
        )
        return random.uniform(ceiling / 2, ceiling)


NO_RETRY = RetryPolicy(attempts=1, stream_attempts=0)


def unary_retryable(err: grpc.aio.AioRpcError) -> bool:
    """The call did not happen, or repeating it is harmless: the runtime (or its store) is away."""
    return err.code() == grpc.StatusCode.UNAVAILABLE


def stream_retryable(err: grpc.aio.AioRpcError) -> bool:
    """The stream broke rather than being refused: a reason-less INTERNAL/UNKNOWN is the
    transport's (RST_STREAM from a dying peer), CANCELLED a draining server's; the runtime's own
    refusals always carry an ErrorInfo reason."""
    code = err.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return reason_of(err) is None
    return False
