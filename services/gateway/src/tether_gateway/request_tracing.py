"""One server span per request. A browser's `traceparent` is not trusted: anyone can send one, to
stitch their requests into another trace, force sampling, or push `baggage` into every service
behind the gateway. So by default each request starts a trace of its own that records the
incoming one only as a span link, and incoming baggage is dropped. TETHER_TRUST_TRACEPARENT=1
(for a gateway only internal callers reach) continues the caller's trace and baggage instead."""

from __future__ import annotations

from collections.abc import Awaitable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from tether_common.tracing import context_from, span_context_from
from tether_common.tracing import enabled as tracing_enabled

_TRACE_HEADERS = ("traceparent", "tracestate")


def tracing_middleware(*, trust_traceparent: bool) -> Middleware:
    tracer = trace.get_tracer("tether.gateway")
    exporting = tracing_enabled()

    @web.middleware
    def span(request: web.Request, handler: Handler) -> Awaitable[web.StreamResponse]:
        continuing = trust_traceparent and "traceparent" in request.headers
        if not exporting and not continuing:
            # Nothing to record and no trace to continue: the handler's coroutine is handed on,
            # not awaited (as the pass-through middlewares do). A no-op span would still cost
            # ~2 KiB, and this frame ~0.3 KiB, for as long as the request lives, and an SSE
            # request lives for hours.
            return handler(request)
        return spanned(request, handler, continuing=continuing)

    async def spanned(
        request: web.Request, handler: Handler, *, continuing: bool
    ) -> web.StreamResponse:
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        if continuing:
            parent, links = context_from(request.headers), None
        else:
            parent, links = Context(), _link_to_incoming(request)
        # Attached, not only passed as the span's parent: the parent's baggage (a trusted
        # caller's) travels on with the span; an untrusted request's context is empty.
        attached = otel_context.attach(parent)
        try:
            with tracer.start_as_current_span(
                f"{request.method} {route}",
                kind=trace.SpanKind.SERVER,
                links=links,
                attributes={"http.request.method": request.method, "http.route": route},
            ) as current:
                resp = await handler(request)
                current.set_attribute("http.response.status_code", resp.status)
                return resp
        finally:
            otel_context.detach(attached)

    return span


def _link_to_incoming(request: web.Request) -> list[trace.Link] | None:
    """The caller's trace, kept as a link (an operator can still find it), never as the parent."""
    carrier = {k: request.headers[k] for k in _TRACE_HEADERS if k in request.headers}
    incoming = span_context_from(carrier) if carrier else None
    if incoming is None:
        return None
    return [trace.Link(incoming, {"tether.link": "untrusted_client_traceparent"})]
