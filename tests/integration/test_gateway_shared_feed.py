"""The gateway's shared run feed through real processes: many SSE clients of one run ride ONE
StreamRunEvents call (counted on the runtime), each gets exactly the events after its own resume
point, a client of another user gets 404 and joins nothing, and a slow client of a shared feed is
dropped while the others finish."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import Frame, SseReader

SSE_ENV = {"TETHER_SSE_HEARTBEAT_S": "1", "TETHER_SSE_BUFFER_BYTES": "4096"}
N_CLIENTS = 50


@pytest.fixture(scope="module")
def stack(base_env: dict[str, str]) -> Iterator[tuple[Proc, str, Proc]]:
    """A runtime of its own (its stream gauge then counts only this gateway's calls) and a gateway."""
    metrics = f"127.0.0.1:{free_port()}"
    rt = start_runtime({**base_env, "TETHER_METRICS_ADDR": metrics}, name="runtime-feed")
    gw = start_gateway({**base_env, **SSE_ENV}, rt.addr, name="gateway-feed")
    yield rt, f"http://{metrics}", gw
    gw.terminate()
    rt.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=90)
    ) as session:
        yield session


def headers(user: str = "alice", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, user)}", **extra}


async def gauge(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
    return 0.0


async def settled(http: aiohttp.ClientSession, url: str, name: str, want: float) -> float:
    """The metric once it equals `want`, or its value after a few seconds of waiting."""
    deadline = time.monotonic() + 8
    value = await gauge(http, url, name)
    while value != want and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        value = await gauge(http, url, name)
    return value


async def new_run(http: aiohttp.ClientSession, base: str, text: str, **extra: str) -> Any:
    async with http.post(f"{base}/v1/conversations", json={}, headers=headers()) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    body = {"text": text, "idempotencyKey": uuid.uuid4().hex}
    return await http.post(
        f"{base}/v1/conversations/{conv}/runs", json=body, headers=headers(**extra)
    )


async def open_events(
    http: aiohttp.ClientSession, base: str, run_id: str, after: int, user: str = "alice"
) -> aiohttp.ClientResponse:
    h = headers(user, Accept="text/event-stream", **{"Last-Event-ID": str(after)})
    return await http.get(f"{base}/v1/runs/{run_id}/events", headers=h)


def triples(frames: list[Frame]) -> list[tuple[str | None, str, str]]:
    return [(f.id, f.event, f.data) for f in frames if f.kind == "event"]


async def test_fifty_clients_one_upstream_each_exact(
    stack: tuple[Proc, str, Proc], http: aiohttp.ClientSession, db: Any
) -> None:
    _, rt_metrics, gw = stack
    service, _ = await abnormal_service(db, prefix="feed")
    resp = await new_run(http, gw.addr, f"restart the abnormal {service} instance")
    assert resp.status == 201
    run_id = (await resp.json())["run"]["id"]
    first = SseReader(await open_events(http, gw.addr, run_id, 0))
    seen = await first.events_until("interrupt")
    latest = int(seen[-1].id or 0)
    assert latest >= 3 and [int(f.id or 0) for f in seen] == list(range(1, latest + 1))

    points = [(0, latest // 2, latest)[i % 3] for i in range(N_CLIENTS)]
    responses = await asyncio.gather(*(open_events(http, gw.addr, run_id, p) for p in points))
    assert all(r.status == 200 for r in responses)
    readers = [SseReader(r) for r in responses]
    # Each got its replay from the ring: read up to the interrupt (or nothing, at `latest`).
    early = await asyncio.gather(
        *(
            r.events_until("interrupt") if p < latest else asyncio.sleep(0, result=[])
            for r, p in zip(readers, points, strict=True)
        )
    )
    # 51 SSE connections of one run: ONE upstream stream, on the gateway and on the runtime.
    assert await settled(http, rt_metrics, "tether_event_streams_active", 1) == 1
    assert await gauge(http, gw.addr, "tether_gateway_sse_upstream_streams") == 1
    assert await gauge(http, gw.addr, "tether_gateway_sse_connections") == N_CLIENTS + 1

    # Another user's client: 404 (its own GetRun fails) and it joins nothing.
    for after in (0, latest):
        async with await open_events(http, gw.addr, run_id, after, user="mallory") as r:
            assert r.status == 404
            assert (await r.json())["error"]["code"] == "RUN_NOT_FOUND"
    assert await gauge(http, gw.addr, "tether_gateway_sse_connections") == N_CLIENTS + 1
    assert await gauge(http, rt_metrics, "tether_event_streams_active") == 1

    body = {
        "interruptId": seen[-1].json["interruptId"],
        "decision": "approve",
        "idempotencyKey": uuid.uuid4().hex,
    }
    async with http.post(f"{gw.addr}/v1/runs/{run_id}/resume", json=body, headers=headers()) as r:
        assert r.status == 202, await r.text()
    full = seen + await first.rest()
    assert full[-1].event == "done"
    rests = await asyncio.gather(*(r.rest() for r in readers))
    for point, got_early, rest, reader in zip(points, early, rests, readers, strict=True):
        got = got_early + rest
        assert reader.ended
        # Exactly the events after its own point, in order, once, byte for byte.
        assert triples(got) == [t for t in triples(full) if int(t[0] or 0) > point], point
    for r in responses:
        r.close()
    first.resp.close()
    # The terminal event closed the feed and its upstream.
    assert await settled(http, gw.addr, "tether_gateway_sse_upstream_streams", 0) == 0
    assert await settled(http, rt_metrics, "tether_event_streams_active", 0) == 0


async def test_slow_client_of_a_shared_feed_is_dropped_others_finish(
    stack: tuple[Proc, str, Proc], http: aiohttp.ClientSession
) -> None:
    _, rt_metrics, gw = stack
    # Feeds of earlier tests have closed (terminal event, or idle linger).
    assert await settled(http, rt_metrics, "tether_event_streams_active", 0) == 0
    drops_before = await gauge(
        http, gw.addr, 'tether_gateway_sse_dropped_total{reason="slow_client"}'
    )
    # POST with Accept: text/event-stream opens the run's feed at 0 before any event exists.
    post = await new_run(http, gw.addr, "stream 3000 deltas", Accept="text/event-stream")
    assert post.status == 201
    run_id = post.headers["X-Run-Id"]
    host, port = gw.addr.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()
    # A client that sends its request and never reads, with a small receive window.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, (host, int(port)))
    request = (
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: {headers()['Authorization']}\r\nLast-Event-ID: 0\r\n\r\n"
    )
    await loop.sock_sendall(sock, request.encode())
    others = [await open_events(http, gw.addr, run_id, 0) for _ in range(3)]
    assert all(r.status == 200 for r in others)
    # The POST's stream, the slow socket and three readers share one upstream.
    assert await gauge(http, gw.addr, "tether_gateway_sse_upstream_streams") == 1
    # That upstream is the bus (the gateway started the run: bus_feed.py), or, once it handed
    # the run over (its subscription overflowed, say), one stream of the runtime's.
    assert await gauge(http, rt_metrics, "tether_event_streams_active") <= 1
    results = await asyncio.gather(*(SseReader(r).rest(timeout=60) for r in [post, *others]))
    for events in results:
        assert events[-1].event == "done"
        ids = [int(f.id) for f in events if f.id]
        assert ids == list(range(1, len(ids) + 1))
        assert triples(events) == triples(results[0])
    assert sum(len(f.data) for f in results[0]) > 30_000
    name = 'tether_gateway_sse_dropped_total{reason="slow_client"}'
    assert await settled(http, gw.addr, name, drops_before + 1) == drops_before + 1
    sock.setblocking(True)
    sock.settimeout(5)
    received = 0
    try:
        while chunk := sock.recv(65536):
            received += len(chunk)
    except ConnectionResetError:
        pass
    sock.close()
    assert received < 60_000  # it got what the kernel held when it was dropped, then EOF/RST
    for r in [post, *others]:
        r.close()
