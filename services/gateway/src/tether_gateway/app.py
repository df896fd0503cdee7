"""The aiohttp application: middleware, routes, static UI, and the lifecycles of the gRPC channel
and the Redis client (created in cleanup_ctx, closed on shutdown)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from tether_common import redis_conn, task_stop
from tether_common.config import Settings
from tether_common.grpc_poller import unblock_completion_poller
from tether_common.sharded_run_bus import event_bus

from tether_gateway import agui, aisdk, api, approvals_api, audit_api, forwarding, health, langgraph
from tether_gateway.bus_feed import watch_quiet
from tether_gateway.csp import add_security_headers
from tether_gateway.errors import error_middleware
from tether_gateway.metrics import Metrics
from tether_gateway.request_tracing import tracing_middleware
from tether_gateway.runtime_client import RuntimeClient, open_channel
from tether_gateway.service_identity import service_identity
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


def create_app(settings: Settings) -> web.Application:
    gw = GatewayState(settings=settings, metrics=Metrics())
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[
            tracing_middleware(trust_traceparent=settings.trust_traceparent),
            gw.metrics.middleware(),
            error_middleware,
            storable_params,
            forwarding.middleware,
        ],
    )
    app[STATE] = gw
    app.on_response_prepare.append(add_security_headers)

    async def runtime_channel(app: web.Application) -> AsyncIterator[None]:
        channel = open_channel(settings)
        unblocked = unblock_completion_poller()  # grpc.aio's poller exists once a channel does
        log.info("runtime channel open", extra={"grpc_poller_sockets_unblocked": unblocked})
        identity = service_identity(settings)
        gw.runtime = RuntimeClient(
            channel, identity=identity, quiet_reopen_s=settings.feed_quiet_reopen_s
        )
        yield
        gw.runtime = None
        await channel.close(grace=1.0)
        if identity is not None:
            await identity.close()

    async def redis_client(app: web.Application) -> AsyncIterator[None]:
        if settings.redis_url:
            # socket_timeout=None: redis-py's default is 5 s (state.GatewayState.redis)
            gw.redis = redis_conn.connect(
                settings.redis_url, socket_connect_timeout=1.0, socket_timeout=None
            )
            gw.revocations_redis = redis_conn.connect(
                settings.redis_url, socket_connect_timeout=1.0, socket_timeout=2.0
            )
        refresher = asyncio.create_task(
            gw.slots.run_refresher(lambda: gw.redis, settings.sse_heartbeat_s),
            name="stream-slot-refresher",
        )
        revocations = asyncio.create_task(
            gw.auth.revocations.follow(lambda: gw.revocations_redis), name="revocation-follower"
        )
        quiet = None
        if settings.redis_url and settings.feed_on_bus:
            gw.bus = event_bus(settings.redis_url)
            await gw.bus.start()
            quiet = asyncio.create_task(
                watch_quiet(
                    gw.bus,
                    settings.stream_quiet_check_s,
                    lambda ids: gw.client().run_positions(ids),
                ),
                name="bus-quiet-watch",
            )
        yield
        for task in (refresher, revocations, quiet):
            await task_stop.stop(task)
        if gw.bus is not None:
            await gw.bus.close()
            gw.bus = None
        for client in (gw.redis, gw.revocations_redis):
            if client is not None:
                await client.aclose()
        gw.redis = gw.revocations_redis = None

    async def end_streams(app: web.Application) -> None:
        gw.drain()

    app.cleanup_ctx.extend([runtime_channel, redis_client])
    app.on_shutdown.append(end_streams)
    app.on_cleanup.append(lambda _: gw.auth.verifier.aclose())
    # With TETHER_METRICS_ADDR, /metrics is served on that port alone (server.py).
    health.add_routes(app, with_metrics=not settings.metrics_addr)
    # The dev token route only when `tether dev` (or a test) asks for it: never by TETHER_ENV.
    api.add_routes(app, dev=settings.dev_login)
    audit_api.add_routes(app)
    approvals_api.add_routes(app)
    langgraph.mount(app, gw)  # the LangGraph Agent Server API, at /langgraph
    agui.mount(app, gw)  # AG-UI 1.0, at /agui
    aisdk.mount(app, gw)  # the AI SDK UI message stream (useChat), at /ai-sdk
    app.router.add_get("/", _index)
    # The more specific prefix first: /static/client/ is not a folder of STATIC_DIR in a checkout.
    app.router.add_static("/static/client/", client_dir(), append_version=False)
    app.router.add_static("/static/", STATIC_DIR, append_version=False)
    return app
