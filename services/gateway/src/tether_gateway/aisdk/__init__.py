"""The Vercel AI SDK's UI message stream (v1) on the gateway, mounted at /ai-sdk:
`useChat` from `@ai-sdk/react` (or `Chat` / `DefaultChatTransport` from `ai`) chats with any
Tether agent, its write tools' confirmations as the AI SDK's tool approvals, its other
interrupts as `data-tether-interrupt` parts, and useChat's stream resume served exactly from
Tether's log on any pod (README "AI SDK (useChat)")."""

from __future__ import annotations

from aiohttp import web
from tether_common.config import Settings

from tether_gateway.aisdk import chat_api
from tether_gateway.langgraph import cors
from tether_gateway.state import STATE, GatewayState

MOUNT = "/ai-sdk"


def aisdk_app(gw: GatewayState) -> web.Application:
    app = web.Application()
    app[STATE] = gw
    chat_api.add_routes(app)
    cors.add_routes(app, _origins)  # last: its OPTIONS route takes any path
    return app


def _origins(settings: Settings) -> frozenset[str]:
    return settings.agui_cors_origins  # the browser frontends' origins (TETHER_AGUI_CORS_ORIGINS)


def mount(app: web.Application, gw: GatewayState) -> None:
    app.add_subapp(MOUNT, aisdk_app(gw))
