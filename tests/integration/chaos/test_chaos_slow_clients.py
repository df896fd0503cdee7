"""Fault 7: slow and dead clients. Sockets that send a request and never read, ones that read a
little then stop, half-open connections that never finish their request, all while healthy
readers stream bursty runs. The gateway's memory stays bounded (RSS before / peak / after) and
the healthy readers get their exact lists."""

from __future__ import annotations

import asyncio
import socket
import time

import asyncpg
import psutil
import pytest
from tether_testkit.history import History
from tether_testkit.processes import start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    Procs,
    check_histories,
    compare,
    expected_frames,
    follow_sse,
    headers,
    http_new_run,
    http_session,
    size,
    stored_events,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(120, 300))]

N_RUNS = size(4, 12)
N_BAD = size(30, 150)  # per kind
STREAM_N = size(12000, 20000)
RSS_BOUND_MB = 80


async def _bad_socket(host: str, port: int, path: str, kind: str) -> socket.socket:
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, (host, port))
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
        f"Authorization: {headers()['Authorization']}\r\n\r\n"
    ).encode()
    if kind == "half-open":
        await loop.sock_sendall(sock, request[: len(request) // 2])  # never finishes the request
    else:
        await loop.sock_sendall(sock, request)
        if kind == "reads-then-stops":
            await asyncio.wait_for(loop.sock_recv(sock, 2048), 10)
    return sock


async def test_slow_and_dead_clients_keep_gateway_memory_bounded(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    env = {**private_env, **CHAOS_ENV, "TETHER_SCRIPTED_DELAY_S": "0.0003"}
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-slow-rt"))
    gw_env = {**env, "TETHER_SSE_HEARTBEAT_S": "1", "TETHER_SSE_BUFFER_BYTES": "16384"}
    gw = procs.add(await asyncio.to_thread(start_gateway, gw_env, rt.addr, name="chaos-slow-gw"))
    gproc = psutil.Process(gw.pid)
    host, port = gw.addr.removeprefix("http://").split(":")
    db = await asyncpg.connect(env["DATABASE_URL"])
    socks: list[socket.socket] = []
    peak = 0
    try:
        async with http_session() as http:
            rss_before = gproc.memory_info().rss
            run_ids = [
                await http_new_run(http, gw.addr, f"stream {STREAM_N} deltas")
                for _ in range(N_RUNS)
            ]
            stop = asyncio.Event()

            async def sample() -> None:
                nonlocal peak
                while not stop.is_set():
                    peak = max(peak, gproc.memory_info().rss)
                    await asyncio.sleep(0.1)

            sampler = asyncio.create_task(sample())
            began = time.monotonic()
            histories = [History(f"reader{i}") for i in range(N_RUNS)] + [History("again")]
            healthy = asyncio.gather(
                *(
                    follow_sse(http, lambda _: gw.addr, r, deadline_s=size(90, 240), record=h)
                    for r, h in zip(run_ids, histories, strict=False)
                )
            )
            for i in range(N_BAD):
                for kind in ("never-reads", "reads-then-stops", "half-open"):
                    path = f"/v1/runs/{run_ids[i % N_RUNS]}/events"
                    socks.append(await _bad_socket(host, int(port), path, kind))
            results = await healthy
            elapsed = time.monotonic() - began
            await asyncio.sleep(3)  # let the gateway notice the stalled writers
            stop.set()
            await sampler
            rss_loaded = gproc.memory_info().rss
            for s in socks:
                s.close()
            socks.clear()
            await asyncio.sleep(2)
            rss_after = gproc.memory_info().rss
            async with http.get(f"{gw.addr}/metrics") as r:
                text = await r.text()
            drops = sum(
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("tether_gateway_sse_dropped_total")
            )
            # The gateway still serves a fresh full replay after all that.
            again = await follow_sse(
                http, lambda _: gw.addr, run_ids[0], deadline_s=30, record=histories[-1]
            )
        events = lost = dup = 0
        problems = []
        for res in [*results, again]:
            stored = await stored_events(db, res.run_id)
            l_, d_ = compare(res.ids, [e.sequence for e in stored])
            lost, dup = lost + l_, dup + d_
            events += len(res.frames)
            if res.frames != expected_frames(stored) or not res.finished:
                problems.append(f"{res.run_id}: healthy reader's list differs from Postgres")
        report = await check_histories(db, histories, run_ids)
    finally:
        for s in socks:
            s.close()
        await db.close()
    mb = 1024 * 1024
    growth = (peak - rss_before) / mb
    print(
        f"\n[fault 7: slow/dead clients] {3 * N_BAD} bad connections (never read / read then stop /"
        f" half-open request) next to {N_RUNS} healthy readers of ~{STREAM_N}-delta bursts: "
        f"gateway RSS before {rss_before / mb:.1f} MB, peak {peak / mb:.1f} MB (+{growth:.1f}), "
        f"loaded {rss_loaded / mb:.1f} MB, after closing {rss_after / mb:.1f} MB; {drops:.0f} slow "
        f"clients dropped; healthy readers done in {elapsed:.1f}s, {events} events checked, "
        f"lost {lost}, duplicated {dup}"
    )
    chaos_table(
        f"7 slow/dead clients x{3 * N_BAD}",
        runs=N_RUNS,
        events=events,
        lost=lost,
        duplicated=dup,
        recovery=f"RSS +{growth:.1f} MB peak",
        report=report,
    )
    assert report.ok, report.explain()
    assert not problems, "\n".join(problems[:20])
    assert growth < RSS_BOUND_MB, f"gateway RSS grew {growth:.1f} MB"
