"""The other ways in follow the runs they start on the bus, as the native streaming POST does
(bus_feed.BusStart): LangGraph's `runs.stream` and `runs.wait` (the official `langgraph-sdk`),
an AG-UI run and an AI SDK chat turn each make ONE StartRun under an id the gateway listens on,
and no StreamRunEvents: the run's first event comes in StartRun's answer, the rest on the bus,
and the run's end on the bus (`tether_gateway_bus_feeds_total{outcome="ended"}`). Without the
bus (TETHER_FEED_ON_BUS=false) the same requests follow the run on the runtime's stream, and
give the same answers. A counting gRPC proxy between the gateway and a real runtime shows which
calls went out."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from langgraph_sdk import get_client
from tether_common.auth import issue_token
from tether_testkit.gateway_metrics import bus_feeds
from tether_testkit.grpc_proxy import CountingProxy, gateway_through_proxy
from tether_testkit.processes import Proc
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]

KINDS = {"bus": {}, "stream": {"TETHER_FEED_ON_BUS": "false"}}
DELTAS = 40
TEXT = "".join(f"t{i} " for i in range(DELTAS))
AUTH = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}


@pytest.fixture(scope="module", params=list(KINDS))
async def proxied(
    request: pytest.FixtureRequest, base_env: dict[str, str], runtime: Proc
) -> AsyncIterator[tuple[str, CountingProxy, Proc]]:
    async with gateway_through_proxy(
        {**base_env, **KINDS[request.param]}, runtime.addr, f"gateway-protocols-{request.param}"
    ) as (proxy, gw):
        yield request.param, proxy, gw


class Followed:
    """What one request cost: the runtime's calls it made, and how its bus feeds ended."""

    def __init__(self, kind: str, proxy: CountingProxy, gw: Proc) -> None:
        self.kind, self.proxy, self.gw = kind, proxy, gw

    async def __aenter__(self) -> Followed:
        self.before = await bus_feeds(self.gw)
        self.proxy.calls.clear()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        calls = self.proxy.calls
        assert calls["StartRun"] == 1, calls
        after = await bus_feeds(self.gw)
        ended = after.get("ended", 0.0) - self.before.get("ended", 0.0)
        if self.kind == "bus":
            assert calls["StreamRunEvents"] == 0, calls
            assert ended == 1, (self.before, after)
            assert after == {**self.before, "ended": self.before.get("ended", 0.0) + 1}
        else:
            assert calls["StreamRunEvents"] >= 1, calls
            assert ended == 0


def _data_lines(body: str) -> list[Any]:
    return [
        json.loads(line[len("data: ") :])
        for line in body.splitlines()
        if line.startswith("data: {")
    ]


async def test_langgraph_runs_stream_and_wait(proxied: tuple[str, CountingProxy, Proc]) -> None:
    kind, proxy, gw = proxied
    lg = get_client(url=f"{gw.addr}/langgraph", headers=AUTH)
    try:
        assistants = await lg.assistants.search()
        opspilot = next(a for a in assistants if a["graph_id"] == "opspilot")["assistant_id"]
        thread = (await lg.threads.create())["thread_id"]
        ask = {"messages": [{"role": "user", "content": f"stream {DELTAS} deltas"}]}
        async with Followed(kind, proxy, gw):
            parts = [
                p async for p in lg.runs.stream(thread, opspilot, input=ask, stream_mode="values")
            ]
        assert [p.event for p in parts][0] == "metadata" and parts[-1].event == "values"
        assert parts[-1].data["messages"][-1]["content"] == TEXT
        async with Followed(kind, proxy, gw):
            values = await lg.runs.wait(thread, opspilot, input=ask)
        assert isinstance(values, dict)
        assert [m["content"] for m in values["messages"][-3:]] == [
            TEXT,
            f"stream {DELTAS} deltas",
            TEXT,
        ]
    finally:
        await lg.aclose()


async def test_an_agui_run(proxied: tuple[str, CountingProxy, Proc]) -> None:
    kind, proxy, gw = proxied
    body = {
        "threadId": uuid.uuid4().hex,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "m1", "role": "user", "content": f"stream {DELTAS} deltas"}],
    }
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with Followed(kind, proxy, gw):
            async with http.post(f"{gw.addr}/agui/opspilot", json=body, headers=AUTH) as r:
                assert r.status == 200, await r.text()
                events = _data_lines(await r.text())
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", types
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == TEXT


async def test_an_ai_sdk_chat_turn(proxied: tuple[str, CountingProxy, Proc]) -> None:
    kind, proxy, gw = proxied
    body = {
        "id": uuid.uuid4().hex,
        "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "stream 40 deltas"}]}
        ],
        "trigger": "submit-message",
    }
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with Followed(kind, proxy, gw):
            async with http.post(f"{gw.addr}/ai-sdk/opspilot/chat", json=body, headers=AUTH) as r:
                assert r.status == 200, await r.text()
                raw = await r.text()
    parts = _data_lines(raw)
    assert parts[0]["type"] == "start" and parts[-1]["type"] == "finish", parts
    assert raw.rstrip().endswith("data: [DONE]")
    assert "".join(p["delta"] for p in parts if p["type"] == "text-delta") == TEXT
