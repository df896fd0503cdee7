"""The AI SDK's chat endpoints: POST /ai-sdk/{agent}/chat (useChat's request in, the UI message
stream v1 out: a new turn, or the answer to the chat's waiting approval or interrupt, which
continues the same assistant message) and GET /ai-sdk/{agent}/chat/{chatId}/stream (useChat's
`resume`: the active turn replayed from its `start`, or exactly after `Last-Event-ID`, then
live; 204 when no turn is active or the client has all of it). The gateway's edge rules as on
/v1: a bearer header or the session cookie (with CSRF on the POST), the per-user rate limits
(start, resume, events) and stream cap, heartbeats; on any pod."""

from __future__ import annotations

import time

import grpc
from aiohttp import web
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.errors import FailedPrecondition, NotFound

from tether_gateway.agui import run_stream
from tether_gateway.agui.run_input import client_id
from tether_gateway.agui.run_start import begin
from tether_gateway.aisdk.chat_request import chat_request
from tether_gateway.aisdk.parts import UiRun
from tether_gateway.auth import Caller, session_or_bearer
from tether_gateway.bus_feed import held
from tether_gateway.langgraph import ids, lookup
from tether_gateway.langgraph.assistants_api import agent_named
from tether_gateway.langgraph.stretches import stretches
from tether_gateway.state import GatewayState, state
from tether_gateway.validation import read_json

HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}


async def chat(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await session_or_bearer(request, gw.auth)
    req = chat_request(await read_json(request, gw.settings.max_body_bytes))
    agent = request.match_info["agent"]
    user = caller.principal.user_id
    async with gw.slots.held(gw.redis, user, gate=gw.limiter.gate("start", user)) as slot:
        begun = await begin(gw, caller, agent, req.run_input())
        mapper = UiRun(run_id=begun.run.id, first=begun.stretch, last=begun.stretch)
        with held(begun.on_bus):
            return await run_stream.serve(
                request,
                gw,
                caller,
                run=begun.run,
                mapper=mapper,
                slot=slot,
                started=started,
                headers=HEADERS,
                on_bus=begun.on_bus,
            )


async def _latest_run(
    gw: GatewayState, caller: Caller, agent: str, chat_id: str
) -> resources_pb2.Run | None:
    client, token = gw.client(), caller.credential
    try:
        conv = await client.get_conversation(rs.GetConversationRequest(client_id=chat_id), token)
    except grpc.aio.AioRpcError as err:
        if err.code() == grpc.StatusCode.NOT_FOUND:
            return None  # a chat with no turn yet
        raise
    run = await lookup.latest_run(client, token, conv.conversation.id)
    if run is not None and run.agent != agent:
        raise NotFound(f"chat {chat_id} is not one of agent {agent}'s")
    return run


async def resume_stream(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    gw = state(request)
    caller = await session_or_bearer(request, gw.auth)
    await gw.limiter.check(gw.redis, "events", caller.principal.user_id)
    chat_id = client_id(request.match_info["id"], "chatId")
    after = ids.cursor(request.headers.get("Last-Event-ID"))
    agent = (await agent_named(gw.client(), caller.credential, request.match_info["agent"])).name
    run = await _latest_run(gw, caller, agent, chat_id)
    if run is None:
        return web.Response(status=204)
    if run.events_expired:
        raise FailedPrecondition("the turn's events are past retention: nothing to replay")
    log = await lookup.read_log(gw.client(), caller.credential, run)
    current = stretches(log)[-1]
    if current.end and after == ids.START:
        return web.Response(status=204)  # no turn is active: it ended, the stream with it

    def mapper() -> UiRun:
        return UiRun(run_id=run.id, first=0, last=current.index, after=after)

    if await run_stream.nothing_left(gw, caller, run, mapper()):
        return web.Response(status=204)
    async with gw.slots.held(gw.redis, caller.principal.user_id) as slot:
        return await run_stream.serve(
            request,
            gw,
            caller,
            run=run,
            mapper=mapper(),
            slot=slot,
            started=started,
            headers=HEADERS,
        )


def add_routes(app: web.Application) -> None:
    app.router.add_post("/{agent}/chat", chat)
    app.router.add_get("/{agent}/chat/{id}/stream", resume_stream)
