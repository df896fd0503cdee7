"""LangGraph's assistants: the runtime's loaded agents (ListAgents). An assistant's id is its
agent's name (the graph name) or the uuid5 derived from it (ids.assistant_id)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from tether.runtime.v1 import resources_pb2
from tether_common.errors import NotFound

from tether_gateway.auth import authenticate
from tether_gateway.langgraph import ids
from tether_gateway.langgraph.run_request import count_field
from tether_gateway.langgraph.views import assistant_json
from tether_gateway.runtime_client import Credential, RuntimeClient
from tether_gateway.state import state
from tether_gateway.validation import read_json


async def agent_named(
    client: RuntimeClient, token: Credential, assistant_id: str
) -> resources_pb2.Agent:
    for agent in (await client.list_agents(token)).agents:
        if assistant_id in (agent.name, ids.assistant_id(agent.name)):
            return agent
    raise NotFound(f"assistant {assistant_id!r} not found")


async def search(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    raw = await read_json(request, gw.settings.max_body_bytes)
    body: dict[str, Any] = raw if isinstance(raw, dict) else {}
    agents = (await gw.client().list_agents(caller.credential)).agents
    found = [
        assistant_json(a)
        for a in agents
        if body.get("graph_id") in (None, a.name) and body.get("name") in (None, a.name)
    ]
    offset = count_field(body, "offset", 0, 10_000)
    limit = count_field(body, "limit", 10, 1000)
    return web.json_response(found[offset : offset + limit])


async def get(request: web.Request) -> web.Response:
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    agent = await agent_named(gw.client(), caller.credential, request.match_info["assistant_id"])
    return web.json_response(assistant_json(agent))


async def schemas(request: web.Request) -> web.Response:
    """A graph agent's JSON Schemas (ListAgents); null for a native agent's, which has none."""
    gw = state(request)
    caller = await authenticate(request, gw.auth)
    agent = await agent_named(gw.client(), caller.credential, request.match_info["assistant_id"])
    return web.json_response(
        {
            "graph_id": agent.name,
            "input_schema": _schema(agent.input_schema_json),
            "output_schema": _schema(agent.output_schema_json),
            "state_schema": _schema(agent.state_schema_json),
            "config_schema": None,
            "context_schema": None,
        }
    )


def _schema(text: str) -> Any:
    return json.loads(text) if text else None


def add_routes(app: web.Application) -> None:
    app.router.add_post("/assistants/search", search)
    app.router.add_get("/assistants/{assistant_id}", get)
    app.router.add_get("/assistants/{assistant_id}/schemas", schemas)
