"""SSE through real processes: one runtime and two gateways (plus throwaway ones), the way pods run.
Resume on another gateway, heartbeats, 204, reset, 400, slow-client drop, SIGTERM drain."""

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
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

SSE_ENV = {"TETHER_SSE_HEARTBEAT_S": "1", "TETHER_SSE_BUFFER_BYTES": "2048"}


@pytest.fixture(scope="module")
def gateways(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    env = {**base_env, **SSE_ENV}
    a = start_gateway(env, runtime.addr, name="gateway-a")
    b = start_gateway(env, runtime.addr, name="gateway-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


def headers(user: str = "alice", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, user)}", **extra}


async def restart_text(db: Any) -> str:
    """Each run restarts its own abnormal instance: a restarted one is healthy for the next test."""
    service, _ = await abnormal_service(db, prefix="sse")
    return f"restart the abnormal {service} instance"


async def new_run(http: aiohttp.ClientSession, base: str, text: str) -> str:
    async with http.post(f"{base}/v1/conversations", json={"title": "sse"}, headers=headers()) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    body = {"text": text, "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{base}/v1/conversations/{conv}/runs", json=body, headers=headers()) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["run"]["id"])


async def open_events(
    http: aiohttp.ClientSession, base: str, run_id: str, last_id: str | None = None
) -> aiohttp.ClientResponse:
    h = headers(Accept="text/event-stream")
    if last_id is not None:
        h["Last-Event-ID"] = last_id
    return await http.get(f"{base}/v1/runs/{run_id}/events", headers=h)


async def approve(http: aiohttp.ClientSession, base: str, run_id: str, interrupt_id: str) -> None:
    body = {"interruptId": interrupt_id, "decision": "approve", "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{base}/v1/runs/{run_id}/resume", json=body, headers=headers()) as r:
        assert r.status == 202, await r.text()


async def finished_run(http: aiohttp.ClientSession, base: str, db: Any) -> tuple[str, list[Any]]:
    """A run taken to `done` (approved), with the full event list as a fresh reader sees it."""
    run_id = await new_run(http, base, await restart_text(db))
    resp = await open_events(http, base, run_id)
    reader = SseReader(resp)
    first = await reader.events_until("interrupt")
    await approve(http, base, run_id, first[-1].json["interruptId"])
    rest = await reader.rest()
    resp.close()
    assert rest[-1].event == "done"
    return run_id, first + rest


async def test_resume_on_another_gateway_is_exact(
    gateways: tuple[str, str], http: aiohttp.ClientSession, db: Any
) -> None:
    a, b = gateways
    run_id = await new_run(http, a, await restart_text(db))
    resp = await open_events(http, a, run_id)
    assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert resp.headers["Cache-Control"] == "no-cache, no-transform"
    assert resp.headers["X-Accel-Buffering"] == "no"
    reader = SseReader(resp)
    retry = await reader.next()
    assert retry is not None and retry.kind == "retry"
    seen = await reader.events_until("tool_finished")
    resp.close()  # the browser loses its connection mid-run

    resp = await open_events(http, b, run_id, last_id=seen[-1].id)
    reader = SseReader(resp)
    more = await reader.events_until("interrupt")
    await approve(http, b, run_id, more[-1].json["interruptId"])
    more += await reader.rest()
    assert reader.ended and more[-1].event == "done"

    got = seen + more
    ids = [int(f.id) for f in got if f.id is not None]
    assert ids == list(range(1, len(ids) + 1)), ids  # dense, ordered, each exactly once
    # Byte-for-byte the same events as a fresh full replay from the other gateway.
    replay = SseReader(await open_events(http, a, run_id, last_id="0"))
    full = await replay.rest()
    assert [(f.id, f.event, f.data) for f in full] == [(f.id, f.event, f.data) for f in got]


async def test_heartbeat_within_interval_while_waiting(
    gateways: tuple[str, str], http: aiohttp.ClientSession, db: Any
) -> None:
    a, _ = gateways
    run_id = await new_run(http, a, await restart_text(db))
    reader = SseReader(await open_events(http, a, run_id))
    events = await reader.events_until("interrupt")
    quiet_from = events[-1].at
    beats = []
    while len(beats) < 2:
        frame = await reader.next(timeout=5)
        assert frame is not None and frame.kind == "comment", frame
        beats.append(frame)
    assert beats[0].text == "keep-alive"
    assert beats[0].at - quiet_from < 1.6  # TETHER_SSE_HEARTBEAT_S=1
    assert beats[1].at - beats[0].at < 1.6
    # The stream stayed open through the interrupt: the approval's events arrive on it.
    await approve(http, a, run_id, events[-1].json["interruptId"])
    rest = await reader.rest()
    assert rest[0].event == "interrupt_resolved" and rest[-1].event == "done"
    reader.resp.close()


async def test_finished_204_ahead_reset_garbage_400(
    gateways: tuple[str, str], http: aiohttp.ClientSession, db: Any
) -> None:
    a, b = gateways
    run_id, events = await finished_run(http, a, db)
    last = events[-1].id
    assert last is not None
    async with await open_events(http, b, run_id, last_id=last) as resp:
        assert resp.status == 204
    async with http.get(f"{b}/v1/runs/{run_id}/events?after={last}", headers=headers()) as resp:
        assert resp.status == 204
    # Ahead of the run: a 200 stream whose event is `reset` with the run's state, then the end.
    resp = await open_events(http, b, run_id, last_id=str(int(last) + 100))
    assert resp.status == 200
    frames = await SseReader(resp).rest()
    assert [f.event for f in frames] == ["reset"]
    assert frames[0].id is None
    run = frames[0].json["run"]
    assert run["status"] == "completed" and run["lastSequence"] == int(last)
    for garbage in ("abc", "-3", "1e3"):
        async with await open_events(http, b, run_id, last_id=garbage) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["code"] == "INVALID_ARGUMENT"


async def _slow_drops(http: aiohttp.ClientSession, base: str) -> float:
    async with http.get(f"{base}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith('tether_gateway_sse_dropped_total{reason="slow_client"}'):
                return float(line.split()[-1])
    return 0.0


async def test_never_reading_client_is_dropped_reader_unaffected(
    base_env: dict[str, str], http: aiohttp.ClientSession
) -> None:
    # A long answer (~100 KB of deltas) streamed over a few seconds, so both clients attach
    # while it is under way. (With no model delay it could end before the slow client's request
    # arrived: its replay then came as one batch, written whole, and nothing was left to drop
    # it for, seen once under load.)
    rt = await asyncio.to_thread(
        start_runtime, {**base_env, "TETHER_SCRIPTED_DELAY_S": "0.001"}, name="runtime-burst"
    )
    env = {**base_env, **SSE_ENV, "TETHER_SSE_BUFFER_BYTES": "4096"}
    gw = await asyncio.to_thread(start_gateway, env, rt.addr, name="gateway-slow")
    try:
        async with http.post(f"{gw.addr}/v1/conversations", json={}, headers=headers()) as r:
            conv = (await r.json())["conversation"]["id"]
        body = {"text": "stream 6000 deltas"}
        async with http.post(
            f"{gw.addr}/v1/conversations/{conv}/runs", json=body, headers=headers()
        ) as r:
            run_id = (await r.json())["run"]["id"]
        host, port = gw.addr.removeprefix("http://").split(":")
        loop = asyncio.get_running_loop()
        # A client that sends its request and never reads, with a small receive window.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, int(port)))
        request = (
            f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: {headers()['Authorization']}\r\n\r\n"
        )
        await loop.sock_sendall(sock, request.encode())
        # A normal reader of the same run on the same gateway gets every event, in order.
        events = await SseReader(await open_events(http, gw.addr, run_id)).rest(timeout=60)
        assert events[-1].event == "done"
        ids = [int(f.id) for f in events if f.id]
        assert ids == list(range(1, len(ids) + 1))
        assert sum(len(f.data) for f in events) > 30_000
        deadline = time.monotonic() + 10
        while await _slow_drops(http, gw.addr) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
        assert await _slow_drops(http, gw.addr) == 1
        # The dropped client's connection is really gone (RST/EOF after what the kernel held).
        sock.setblocking(True)
        sock.settimeout(5)
        received = 0
        try:
            while chunk := sock.recv(65536):
                received += len(chunk)
        except ConnectionResetError:
            pass
        sock.close()
        assert received < 30_000
    finally:
        await asyncio.to_thread(gw.terminate)
        await asyncio.to_thread(rt.terminate)


async def test_sigterm_ends_streams_and_exits_within_drain(
    runtime: Proc,
    base_env: dict[str, str],
    gateways: tuple[str, str],
    http: aiohttp.ClientSession,
    db: Any,
) -> None:
    env = {**base_env, **SSE_ENV}
    gw = await asyncio.to_thread(start_gateway, env, runtime.addr, name="gateway-drain")
    run_id = await new_run(http, gw.addr, await restart_text(db))
    reader = SseReader(await open_events(http, gw.addr, run_id))
    seen = await reader.events_until("interrupt")
    began = time.monotonic()
    gw.popen.send_signal(15)
    while await reader.next(timeout=5) is not None:
        pass  # heartbeats until the gateway ends the stream
    ended_after = time.monotonic() - began
    code = await asyncio.to_thread(gw.popen.wait, 10)
    exited_after = time.monotonic() - began
    assert ended_after < 1.0, f"stream ended {ended_after:.2f}s after SIGTERM"
    assert code == 0 and exited_after < float(base_env["TETHER_DRAIN_S"]), exited_after
    # The client reconnects to another pod from its last id and misses nothing.
    other = gateways[0]
    reader = SseReader(await open_events(http, other, run_id, last_id=seen[-1].id))
    await approve(http, other, run_id, seen[-1].json["interruptId"])
    rest = await reader.rest()
    ids = [int(f.id) for f in seen + rest if f.id]
    assert ids == list(range(1, len(ids) + 1)) and rest[-1].event == "done"


async def test_post_streams_the_run_and_first_event_is_fast(
    gateways: tuple[str, str], http: aiohttp.ClientSession
) -> None:
    a, _ = gateways
    async with http.post(f"{a}/v1/conversations", json={}, headers=headers()) as r:
        conv = (await r.json())["conversation"]["id"]
    waits = []
    for _ in range(5):
        began = time.monotonic()
        resp = await http.post(
            f"{a}/v1/conversations/{conv}/runs",
            json={"text": "look at the recent errors of payment-api"},
            headers=headers(Accept="text/event-stream"),
        )
        assert resp.status == 201 and resp.headers["X-Run-Id"].startswith("run_")
        reader = SseReader(resp)
        first = await reader.events_until("run_started", "text_delta", "tool_started")
        waits.append(first[0].at - began)
        rest = await reader.rest()
        assert (first + rest)[-1].event in ("done", "interrupt") or not reader.ended
        resp.close()
    waits.sort()
    print(
        f"POST -> first SSE event: median {waits[2] * 1000:.1f} ms, max {waits[-1] * 1000:.1f} ms"
    )
    assert waits[2] < 1.0
