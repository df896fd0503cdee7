"""CORS for a mount a web app on another origin calls from the browser with a bearer token:
/langgraph (a React page with `useStream`) and /agui (an AG-UI page). Only the origins its setting
lists are granted (TETHER_LANGGRAPH_CORS_ORIGINS, TETHER_AGUI_CORS_ORIGINS), and never
credentials: a granted origin's page can do only what the token it holds allows (csrf.py's cookie
session is not reachable through the grant). The grant exposes `Location` and
`Content-Location`, which the LangGraph SDK reads for the run id (`onRunCreated`, what
`useStream` rejoins after a reload) and reconnects to, and where an AG-UI run reconnects."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from tether_common.config import Settings

from tether_gateway.state import state

METHODS = "GET, POST, PATCH, DELETE, OPTIONS"
EXPOSED = "Location, Content-Location, Retry-After"
PREFLIGHT_MAX_AGE_S = 600

Origins = Callable[[Settings], frozenset[str]]
ORIGINS: web.AppKey[Origins] = web.AppKey("cors_origins")  # the mount's granted origins


def _langgraph_origins(settings: Settings) -> frozenset[str]:
    return settings.langgraph_cors_origins


def _granted(request: web.Request) -> str | None:
    origin = request.headers.get("Origin")
    if origin and origin in request.app[ORIGINS](state(request).settings):
        return origin
    return None


async def preflight(request: web.Request) -> web.Response:
    """OPTIONS on any path of the mount: the grant for a listed origin, a bare 204 otherwise
    (the browser then refuses the request itself)."""
    resp = web.Response(status=204, headers={"Vary": "Origin"})
    origin = _granted(request)
    if origin is not None and request.headers.get("Access-Control-Request-Method"):
        resp.headers["Access-Control-Allow-Origin"] = origin
        resp.headers["Access-Control-Allow-Methods"] = METHODS
        asked = request.headers.get("Access-Control-Request-Headers", "")
        if asked:
            resp.headers["Access-Control-Allow-Headers"] = asked
        resp.headers["Access-Control-Max-Age"] = str(PREFLIGHT_MAX_AGE_S)
    return resp


async def grant(request: web.Request, response: web.StreamResponse) -> None:
    """An `on_response_prepare` hook: every answer of the mount (streams and errors too) is
    readable by a listed origin's page."""
    origin = _granted(request)
    response.headers.add("Vary", "Origin")
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = EXPOSED


def add_routes(app: web.Application, origins: Origins = _langgraph_origins) -> None:
    """Last: the catch-all OPTIONS route must not shadow the API's own routes."""
    app[ORIGINS] = origins
    app.router.add_route("OPTIONS", r"/{tail:[\s\S]*}", preflight)  # any path, line breaks too
    app.on_response_prepare.append(grant)
