"""The browser's address, for the runtime's audit log: each request's `X-Forwarded-For` chain
(as a proxy in front of the gateway set it) with the address this gateway saw appended, as a
proxy does. The runtime records it as given; only the last entry is this gateway's own
observation, earlier ones are whatever the proxies in front (or the client) sent. gRPC metadata
carries printable ASCII only: any other character of the header is sent as `?`."""

from __future__ import annotations

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
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    token = forwarded_for.set(chain(request))
    try:
        return await handler(request)
    finally:
        forwarded_for.reset(token)
