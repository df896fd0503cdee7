"""The LangGraph Agent Server API on the gateway, mounted at /langgraph: the official
`langgraph-sdk` client works unchanged over Tether's runs (README "Tether as your LangGraph
server"; DESIGN "The LangGraph API")."""

from __future__ import annotations

from aiohttp import web

from tether_gateway.langgraph import assistants_api, cors, runs_api, threads_api
from tether_gateway.langgraph.api_key import api_key_as_bearer
from tether_gateway.langgraph.errors import detail_errors
from tether_gateway.state import STATE, GatewayState

MOUNT = "/langgraph"


async def info(request: web.Request) -> web.Response:
    return web.json_response(
        {"version": "tether", "flags": {"assistants": True, "crons": False, "langsmith": False}}
    )


async def ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def langgraph_app(gw: GatewayState) -> web.Application:
    app = web.Application(middlewares=[detail_errors, api_key_as_bearer])
    app[STATE] = gw
    app.router.add_get("/info", info)
    app.router.add_get("/ok", ok)
    assistants_api.add_routes(app)
    threads_api.add_routes(app)
    runs_api.add_routes(app)
    cors.add_routes(app)  # last: its OPTIONS route takes any path
    return app


def mount(app: web.Application, gw: GatewayState) -> None:
    app.add_subapp(MOUNT, langgraph_app(gw))
