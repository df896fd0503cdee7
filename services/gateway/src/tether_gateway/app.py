"""The aiohttp application: middleware, routes, static UI, and the lifecycles of the gRPC channel
and the Redis client (created in cleanup_ctx, closed on shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import redis.asyncio as redis_asyncio
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry import trace
from tether_common.config import Settings
from tether_common.grpc_poller import unblock_completion_poller
from tether_common.tracing import context_from
from tether_common.tracing import enabled as tracing_enabled

from tether_gateway import api, audit_api, forwarding, health
from tether_gateway.errors import error_middleware
from tether_gateway.metrics import Metrics
from tether_gateway.runtime_client import RuntimeClient, open_channel
from tether_gateway.state import STATE, GatewayState
from tether_gateway.validation import storable_params

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"


def client_dir() -> Path:
    """Where /static/client/ (the JS client the demo UI imports) is served from: in a checkout
    (an editable install, `make run`) its source, clients/js/src, itself; in a wheel the copy
    hatch_build.py put there. One source, never a copy kept in sync by hand."""
    checkout = Path(__file__).resolve().parents[4] / "clients" / "js" / "src"
    if (checkout / "index.js").is_file():
        return checkout
    packaged = STATIC_DIR / "client"
    if (packaged / "index.js").is_file():
        return packaged
    raise RuntimeError(f"the JS client is missing: neither {checkout} nor {packaged} exists")


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


def _security_headers() -> Middleware:
    @web.middleware
    async def add(request: web.Request, handler: Handler) -> web.StreamResponse:
        resp = await handler(request)
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        if request.path == "/" or request.path.startswith("/static/"):
            resp.headers.setdefault("X-Frame-Options", "DENY")
        return resp

    return add


def _tracing() -> Middleware:
    """One server span per request, continuing a `traceparent` the browser may send."""
    tracer = trace.get_tracer("tether.gateway")
    exporting = tracing_enabled()

    @web.middleware
    async def span(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not exporting and "traceparent" not in request.headers:
            # Nothing to record and no trace to continue: a no-op span would still cost ~2 KiB
            # for as long as the request lives, and an SSE request lives for hours.
            return await handler(request)
        info = request.match_info.route.resource
        route = info.canonical if info is not None else "unmatched"
        with tracer.start_as_current_span(
            f"{request.method} {route}",
            context=context_from(request.headers),
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": request.method, "http.route": route},
        ) as current:
            resp = await handler(request)
            current.set_attribute("http.response.status_code", resp.status)
            return resp

    return span


def create_app(settings: Settings) -> web.Application:
    gw = GatewayState(settings=settings, metrics=Metrics())
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[
            _tracing(),
            gw.metrics.middleware(),
            error_middleware,
            _security_headers(),
            storable_params,
            forwarding.middleware,
        ],
    )
    app[STATE] = gw

    async def runtime_channel(app: web.Application) -> AsyncIterator[None]:
        channel = open_channel(settings.runtime_target)
        unblocked = unblock_completion_poller()  # grpc.aio's poller exists once a channel does
        log.info("runtime channel open", extra={"grpc_poller_sockets_unblocked": unblocked})
        gw.runtime = RuntimeClient(channel)
        yield
        gw.runtime = None
        await channel.close(grace=1.0)

    async def redis_client(app: web.Application) -> AsyncIterator[None]:
        if settings.redis_url:
            gw.redis = redis_asyncio.Redis.from_url(
                settings.redis_url, socket_connect_timeout=1.0, socket_timeout=2.0
            )
        refresher = asyncio.create_task(
            gw.slots.run_refresher(lambda: gw.redis, settings.sse_heartbeat_s)
        )
        yield
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
        if gw.redis is not None:
            await gw.redis.aclose()
            gw.redis = None

    async def end_streams(app: web.Application) -> None:
        gw.drain()

    app.cleanup_ctx.extend([runtime_channel, redis_client])
    app.on_shutdown.append(end_streams)
    health.add_routes(app)
    api.add_routes(app, dev=settings.env == "dev")
    audit_api.add_routes(app)
    app.router.add_get("/", _index)
    # The more specific prefix first: /static/client/ is not a folder of STATIC_DIR in a checkout.
    app.router.add_static("/static/client/", client_dir(), append_version=False)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    return app
