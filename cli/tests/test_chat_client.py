"""The chat client's pieces that need no Tether: the SSE reader against a real aiohttp server
writing awkward chunks (CRLF split across writes, a character split across writes, multi-line
data, comments), `follow` skipping what it already handed out after a reconnect, and the
type checks of a form's answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tether_cli.chat_answers import NoAnswer, Preset, answer, ask_fill, coerce, pick
from tether_cli.gateway_http import ApiError, GatewayApi, sse_events


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, list[int]]]:
    """/chunks: one stream in awkward pieces. /events: a run that breaks after its second
    event the first time, then (asked with Last-Event-ID) replays from 1 regardless."""
    opened: list[int] = []

    async def chunks(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        e = "é".encode()
        for piece in [
            b"retry: 2000\r",
            b"\n: keep-alive\r\n\r\n",
            b'id: 1\r\nevent: text_delta\r\ndata: {"type": "text_delta", "sequence": 1, "delta": "caf',
            e[:1],
            e[1:] + b'"}\r',
            b"\n\r\n",
            b'data: {"type": "done",\ndata:  "sequence": 2}\n\n',
        ]:
            await resp.write(piece)
            await asyncio.sleep(0.01)
        return resp

    async def events(request: web.Request) -> web.StreamResponse:
        opened.append(int(request.headers.get("Last-Event-ID", "-1")))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        count = 2 if len(opened) == 1 else 4
        for seq in range(1, count + 1):
            kind = "done" if seq == 4 else "text_delta"
            body = {"type": kind, "sequence": seq, "delta": f"d{seq}"}
            await resp.write(f"id: {seq}\ndata: {json.dumps(body)}\n\n".encode())
        if count == 2:
            assert request.transport is not None
            request.transport.close()  # the gateway goes away mid-run
        return resp

    app = web.Application()
    app.router.add_get("/chunks", chunks)
    app.router.add_get("/v1/runs/{id}/events", events)
    srv = TestServer(app)
    await srv.start_server()
    yield srv, opened
    await srv.close()


async def test_sse_reader_handles_split_lines_characters_and_multiline_data(
    server: tuple[TestServer, list[int]],
) -> None:
    srv, _ = server
    api = GatewayApi(str(srv.make_url("")), "t")
    try:
        async with api.session.get(str(srv.make_url("/chunks"))) as resp:
            got = [ev async for ev in sse_events(resp)]
    finally:
        await api.close()
    assert got == [
        {"type": "text_delta", "sequence": 1, "delta": "café"},
        {"type": "done", "sequence": 2},
    ]


async def test_follow_reconnects_after_the_last_event_and_never_repeats_one(
    server: tuple[TestServer, list[int]],
) -> None:
    srv, opened = server
    notices: list[str] = []
    api = GatewayApi(str(srv.make_url("")), "t", notice=notices.append)
    try:
        got = [ev["sequence"] async for ev in api.follow("run_1", 0)]
    finally:
        await api.close()
    assert got == [1, 2, 3, 4]
    assert opened == [0, 2]  # the reconnect asked for what comes after event 2
    assert any("reconnected: continuing after event 2" in n for n in notices)


def test_form_values_are_type_checked() -> None:
    spec = {"type": "integer", "minimum": 0, "maximum": 50}
    assert coerce("7", spec) == 7
    for bad, why in (("x", "not a whole number"), ("51", "at most 50"), ("-1", "at least 0")):
        with pytest.raises(ValueError, match=why):
            coerce(bad, spec)
    assert coerce("yes", {"type": "boolean"}) is True
    assert coerce("b", {"type": "string", "enum": ["a", "b"]}) == "b"
    with pytest.raises(ValueError, match="one of a, b"):
        coerce("c", {"type": "string", "enum": ["a", "b"]})


def test_a_form_is_asked_field_by_field_until_each_fits() -> None:
    schema = {
        "type": "object",
        "properties": {"replicas": {"type": "integer", "maximum": 5}, "note": {"type": "string"}},
        "required": ["replicas"],
    }
    lines = iter(["lots", "9", "4", ""])
    said: list[str] = []
    assert ask_fill(schema, lambda _q: next(lines), said.append) == {"replicas": 4}
    assert said == ["'lots' is not a whole number", "at most 5"]
    whole = iter(['{"replicas": 99}'])
    assert ask_fill(schema, lambda _q: next(whole), said.append) == {"replicas": 99}


def test_answers_from_presets_or_the_end_of_input() -> None:
    options = [{"value": "a-1"}, {"value": "a-2"}]
    assert pick(options, "2") == "a-2" and pick(options, "a-1") == "a-1"
    assert pick(options, "3") is None
    ev: dict[str, Any] = {
        "interruptId": "int_1",
        "kind": "select_option",
        "payload": {"options": options},
    }
    got = answer(ev, Preset(option="2"), lambda _q: None, print)
    assert (got["decision"], got["option"], got["interruptId"]) == ("respond", "a-2", "int_1")
    confirm = {"interruptId": "int_2", "kind": "confirm_action", "payload": {}}
    with pytest.raises(NoAnswer):
        answer(confirm, Preset(), lambda _q: None, print)
    one, two = (answer(confirm, Preset(confirm="reject"), lambda _q: None, print) for _ in "12")
    assert one["decision"] == "reject" and one["idempotencyKey"] != two["idempotencyKey"]


REAUTH = b'event: reauthenticate\ndata: {"type":"reauthenticate","reason":"expired"}\n\n'


@pytest.fixture
async def reauth_server() -> AsyncIterator[tuple[TestServer, list[int]]]:
    """/v1/runs/ok/events: event 1 then `reauthenticate` the first time; after that the rest.
    /v1/runs/never/events: `reauthenticate` every time (a token that stays refused)."""
    opened: list[int] = []

    async def events(request: web.Request) -> web.StreamResponse:
        opened.append(int(request.headers.get("Last-Event-ID", "-1")))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if request.match_info["id"] == "never":
            await resp.write(REAUTH)
            return resp
        if len(opened) == 1:
            one = {"type": "text_delta", "sequence": 1, "delta": "a"}
            await resp.write(f"id: 1\ndata: {json.dumps(one)}\n\n".encode() + REAUTH)
            return resp
        await resp.write(b'id: 2\ndata: {"type": "done", "sequence": 2}\n\n')
        return resp

    app = web.Application()
    app.router.add_get("/v1/runs/{id}/events", events)
    srv = TestServer(app)
    await srv.start_server()
    yield srv, opened
    await srv.close()


async def test_follow_reconnects_at_once_after_reauthenticate(
    reauth_server: tuple[TestServer, list[int]],
) -> None:
    srv, opened = reauth_server
    notices: list[str] = []
    api = GatewayApi(str(srv.make_url("")), "t", notice=notices.append)
    try:
        got = [ev["sequence"] async for ev in api.follow("ok", 0)]
        opened.clear()
        with pytest.raises(ApiError) as info:
            [ev async for ev in api.follow("never", 0)]
    finally:
        await api.close()
    assert got == [1, 2]
    assert any("token ended: reconnecting after event 1" in n for n in notices)
    assert not any("connection lost" in n for n in notices), "no backoff for a reauthenticate"
    assert info.value.status == 401 and len(opened) == 2, "a second one in a row is the end"
