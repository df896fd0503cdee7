"""Liveness, readiness (runtime gRPC health + Redis ping + the revoked tokens loaded),
Prometheus metrics, OpenAPI."""

from __future__ import annotations

import asyncio
import json
from importlib import resources

from aiohttp import web

from tether_gateway.state import STATE, state

REDIS_PING_TIMEOUT_S = 1.0


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _redis_ok(redis: object) -> bool:
    if redis is None:
        return True  # no Redis configured (dev without one): nothing to wait for
    try:
        return bool(await asyncio.wait_for(redis.ping(), REDIS_PING_TIMEOUT_S))  # type: ignore[attr-defined]
    except (OSError, TimeoutError, ConnectionError):
        return False
    except Exception:  # noqa: BLE001 - redis' own errors: any failure means "not ready"
        return False


async def readyz(request: web.Request) -> web.Response:
    gw = state(request)
    runtime = gw.runtime is not None and await gw.runtime.serving()
    redis = await _redis_ok(gw.redis)
    # A pod that has not loaded the revoked tokens yet would let a signed-out session in.
    revocations = gw.auth.revocations.synced.is_set()
    ready = runtime and redis and revocations and not gw.draining
    checks = {
        "runtime": "ok" if runtime else "unavailable",
        "redis": "ok" if redis else "unavailable",
        "revocations": "ok" if revocations else "loading",
        "draining": gw.draining,
    }
    return web.json_response(
        {"status": "ready" if ready else "not_ready", "checks": checks},
        status=200 if ready else 503,
    )


async def metrics(request: web.Request) -> web.Response:
    body = state(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


def openapi_document() -> dict[str, object]:
    text = resources.files("tether_gateway").joinpath("openapi.json").read_text("utf-8")
    doc: dict[str, object] = json.loads(text)
    return doc


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def add_routes(app: web.Application, *, with_metrics: bool = True) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if with_metrics:
        app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)


def metrics_app(api: web.Application) -> web.Application:
    """/metrics alone, for its own port (TETHER_METRICS_ADDR): what the API app counts, served
    where only the monitoring namespace may connect, never on the port the Ingress reaches."""
    app = web.Application()
    app[STATE] = api[STATE]
    app.router.add_get("/metrics", metrics)
    return app
