"""AG-UI 1.0 on the gateway, mounted at /agui: the official `@ag-ui/client` HttpAgent (and
CopilotKit over it) runs any Tether agent, with its interrupts as AG-UI's interrupt outcome and
`resume[]`, and Tether's extension for what AG-UI's HTTP binding lacks, an exact reconnect
(README "AG-UI")."""

from __future__ import annotations

from aiohttp import web
from tether_common.config import Settings

from tether_gateway.agui import runs_api
from tether_gateway.langgraph import cors
from tether_gateway.state import STATE, GatewayState

MOUNT = "/agui"


def agui_app(gw: GatewayState) -> web.Application:
    app = web.Application()
    app[STATE] = gw
    runs_api.add_routes(app)
    cors.add_routes(app, _origins)  # last: its OPTIONS route takes any path
    return app


def _origins(settings: Settings) -> frozenset[str]:
    return settings.agui_cors_origins


def mount(app: web.Application, gw: GatewayState) -> None:
    app.add_subapp(MOUNT, agui_app(gw))
