"""The browser's address, for the runtime's audit log: each request's `X-Forwarded-For` chain
(as a proxy in front of the gateway set it) with the address this gateway saw appended, as a
proxy does. The runtime records it as given; only the last entry is this gateway's own
observation, earlier ones are whatever the proxies in front (or the client) sent. gRPC metadata
carries printable ASCII only: any other character of the header is sent as `?`."""

from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar

from aiohttp import web
from aiohttp.typedefs import Handler

forwarded_for: ContextVar[str] = ContextVar("forwarded_for", default="")
MAX_CHARS = 300


def printable(value: str) -> str:
    """`value` as gRPC metadata may carry it (0x20-0x7E): a header is Latin-1 on the wire."""
    return "".join(c if " " <= c <= "~" else "?" for c in value)


def chain(request: web.Request) -> str:
    seen = request.remote or ""
    earlier = printable(request.headers.get("X-Forwarded-For", "")).strip()
    value = f"{earlier}, {seen}" if earlier and seen else earlier or seen
    return value[-MAX_CHARS:]  # the nearest hops matter most


@web.middleware
def middleware(request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]:
    """Sets the chain in the request's own context (aiohttp runs each request in a task of its
    own, which copies the context: nothing leaks to the next request, nothing to reset), then
    hands the handler's coroutine on without awaiting it: a plain function keeps no frame alive
    while the request lasts, and an SSE stream's lasts for hours."""
    forwarded_for.set(chain(request))
    return handler(request)
