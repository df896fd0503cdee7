"""Issue #35 finding 6: a closed approvals stream (GET /v1/approvals/events) ends cleanly. Its
client gone, the gateway logs no error and no 500, gives the user's stream slot back at once and
stops asking the runtime for the inbox. Before the fix the dead stream held its slot and polled
ListPendingApprovals every second until a write failed, then logged the failure with a
traceback and a 500."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.security import bearer, new_user
from tether_testkit.sse import SseReader

INBOX_POLLS = 'tether_grpc_request_seconds_count{method="ListPendingApprovals"'


@pytest.fixture
async def stack(base_env: dict[str, str]) -> AsyncIterator[tuple[Proc, str, Proc]]:
    metrics = f"127.0.0.1:{free_port()}"
    rt = start_runtime({**base_env, "TETHER_METRICS_ADDR": metrics}, name="runtime-inbox-close")
    # One stream per user, and heartbeats far apart: a dead stream that still held its slot
    # would keep the user's next stream out for the whole test.
    env = {**base_env, "TETHER_MAX_STREAMS_PER_USER": "1", "TETHER_SSE_HEARTBEAT_S": "60"}
    gw = start_gateway(env, rt.addr, name="gateway-inbox-close")
    yield rt, f"http://{metrics}", gw
    gw.terminate()
    rt.terminate()


async def _polls(http: aiohttp.ClientSession, metrics: str) -> float:
    async with http.get(f"{metrics}/metrics") as r:
        text = await r.text()
    return sum(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith(INBOX_POLLS)
    )


async def _open_and_close(http: aiohttp.ClientSession, gw: Proc, user: str) -> None:
    resp = await http.get(f"{gw.addr}/v1/approvals/events", headers=bearer(user))
    assert resp.status == 200, await resp.text()
    [frame] = await SseReader(resp).events_until("approvals", timeout=20)
    assert frame.json["approvals"] == []
    resp.close()  # the browser tab closes: the connection goes away mid-stream


async def test_a_closed_inbox_stream_ends_cleanly(stack: tuple[Proc, str, Proc]) -> None:
    _, metrics, gw = stack
    user = new_user("inbox-close")
    async with aiohttp.ClientSession() as http:
        await _open_and_close(http, gw, user)
        await asyncio.sleep(1.5)
        # The slot came back: the user's only stream may open again (429 while a dead one holds it).
        await _open_and_close(http, gw, user)
        await asyncio.sleep(1.5)
        before = await _polls(http, metrics)
        await asyncio.sleep(4)
        # Nobody is listening: no more inbox queries (the dead stream asked every second).
        assert await _polls(http, metrics) - before == 0
    log = gw.log()
    for sign in ("Traceback", "unhandled", "Error handling request", '" 500 '):
        assert sign not in log, f"{sign!r} in the gateway's log:\n{log[-3000:]}"
