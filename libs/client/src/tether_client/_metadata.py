"""Call metadata: the bearer token, and the caller's trace context when OpenTelemetry is there.

OpenTelemetry is optional: when `opentelemetry` imports and the caller has a current span, its
`traceparent` (and `tracestate`/`baggage`, as the configured propagator writes them) go with
each call, so the runtime's spans continue the caller's trace. Without it nothing is added."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from inspect import isawaitable
from typing import Any, TypeAlias

_propagate: Any
try:
    from opentelemetry import propagate as _propagate
except ImportError:  # the wheel test's bare virtualenv runs this branch
    _propagate = None

TokenProvider: TypeAlias = Callable[[], str | Awaitable[str]]
# A service token with the on-behalf capability names the user it acts for in this metadata.
ON_BEHALF_METADATA = "x-tether-on-behalf-of"


def trace_metadata() -> list[tuple[str, str]]:
    if _propagate is None:
        return []
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    return list(carrier.items())


async def call_metadata(
    token: str | None, provider: TokenProvider | None, extra: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """Fresh for every attempt: a provider may hand out a renewed token on a retry."""
    bearer = token
    if provider is not None:
        got = provider()
        bearer = await got if isawaitable(got) else got
    auth = (("authorization", f"Bearer {bearer}"),) if bearer else ()
    return (*auth, *extra, *trace_metadata())
