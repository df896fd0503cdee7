"""`tether runtime|gateway --processes N` (issue #17): N real processes on one port under one
supervisor. New connections land on every child (seen in the pod's merged metrics, labelled by
process), runs complete, a SIGKILLed child is replaced, a child that refuses its configuration
stops the pod, and SIGTERM drains every child together: the supervisor exits 0, none left."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tether.runtime.v1 import runtime_service_pb2_grpc
from tether_common.auth import issue_token
from tether_testkit.client import Client, token, types
from tether_testkit.processes import (
    LOG_DIR,
    Proc,
    free_port,
    grpc_serving,
    http_ready,
    start_gateway,
    start_runtime,
)
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

pytestmark = [pytest.mark.slow(seconds=26), pytest.mark.timeout(180)]


def children_of(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is `pid`, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its last ')'.
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start_pod(service: str, processes: int, env: dict[str, str], addr: str) -> Proc:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"pod-{service}-{os.getpid()}-{time.time_ns()}.log"
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            [sys.executable, "-m", "tether_cli.main", service, "--processes", str(processes)],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Proc(name=f"pod-{service}", popen=popen, log_path=log_path, addr=addr, env=env)


def wait_for(proc: Proc, ready: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.alive(), f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}"
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"{proc.name} not ready in {timeout}s:\n{proc.log()[-4000:]}")


def scrape(addr: str) -> dict[str, dict[str, float]]:
    """The pod's metrics: sample name -> process slot -> value summed over other labels."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            by_slot = out.setdefault(s.name, {})
            slot = s.labels["process"]
            by_slot[slot] = by_slot.get(slot, 0.0) + s.value
    return out


def stop_pod(pod: Proc, kids: set[int], grace_s: float) -> None:
    """SIGTERM the supervisor: it exits 0 within the grace period and no child outlives it."""
    began = time.monotonic()
    pod.popen.send_signal(signal.SIGTERM)
    code = pod.popen.wait(grace_s + 15)
    took = time.monotonic() - began
    assert code == 0, pod.log()[-4000:]
    assert took < grace_s, f"supervisor took {took:.1f}s to drain (grace {grace_s}s)"
    assert not [k for k in kids if alive(k)], "a child outlived its supervisor"
    assert "pod stopped" in pod.log()


@pytest.fixture
def pods() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        kids = children_of(p.pid)
        p.kill()
        for k in kids:
            if alive(k):
                os.kill(k, signal.SIGKILL)


class _OwnConnection(Client):
    """A client on a TCP connection of its own: grpc shares one per target across a process's
    channels unless the channel keeps a local subchannel pool."""

    def __post_init__(self) -> None:
        self.channel = grpc.aio.insecure_channel(
            self.addr, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.stub = runtime_service_pb2_grpc.RuntimeServiceStub(self.channel)


async def _run_to_done(addr: str) -> None:
    client = _OwnConnection(addr, token(TEST_SECRET, "alice"))
    try:
        conv = await client.conversation()
        started = await client.start(conv, "stream 5 deltas")
        evs = await client.events(started.run.id)
        assert types(evs)[-1] == "done", types(evs)
    finally:
        await client.close()


async def test_runtime_processes_share_a_port_restart_and_drain(
    private_env: dict[str, str], pods: list[Proc]
) -> None:
    addr, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = {**private_env, "TETHER_GRPC_ADDR": addr, "TETHER_METRICS_ADDR": metrics}
    pod = start_pod("runtime", 2, env, addr)
    pods.append(pod)
    await asyncio.to_thread(wait_for, pod, lambda: len(children_of(pod.pid)) == 2)
    await asyncio.to_thread(wait_for, pod, lambda: grpc_serving(addr))
    # Both children must be up before connections can spread: both report to the merged page.
    await asyncio.to_thread(
        wait_for, pod, lambda: scrape(metrics)["tether_pod_process_up"] == {"0": 1, "1": 1}
    )
    await asyncio.gather(*(_run_to_done(addr) for _ in range(16)))
    seen = scrape(metrics)
    calls = seen["tether_grpc_request_seconds_count"]
    # 16 connections from different source ports: the kernel's hash put some on each child.
    assert calls.get("0", 0) > 0 and calls.get("1", 0) > 0, calls
    assert set(seen["tether_queue_depth"]) == {"0", "1"}  # the scaling signal, from each
    assert sum(seen["tether_runs_finished_total"].values()) == 16

    # A SIGKILLed child is replaced; the pod keeps serving on the same port.
    first = children_of(pod.pid)
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    await asyncio.to_thread(
        wait_for, pod, lambda: len(kids := children_of(pod.pid)) == 2 and victim not in kids
    )
    await asyncio.to_thread(
        wait_for, pod, lambda: scrape(metrics)["tether_pod_process_up"] == {"0": 1, "1": 1}
    )
    assert "restarting in" in pod.log()
    await asyncio.gather(*(_run_to_done(addr) for _ in range(4)))

    await asyncio.to_thread(stop_pod, pod, children_of(pod.pid), float(env["TETHER_DRAIN_S"]) + 10)


async def test_a_child_refusing_its_configuration_stops_the_pod(
    private_env: dict[str, str], pods: list[Proc]
) -> None:
    # An agent that cannot load fails every restart the same way: no crash loop, exit 2.
    env = {**private_env, "TETHER_GRPC_ADDR": f"127.0.0.1:{free_port()}"}
    env["TETHER_AGENTS"] = "tether_no_such_module:agent"
    pod = start_pod("runtime", 2, env, env["TETHER_GRPC_ADDR"])
    pods.append(pod)
    code = await asyncio.to_thread(pod.popen.wait, 90)
    assert code == 2, pod.log()[-4000:]
    assert "refused its configuration" in pod.log()
    assert "restarting in" not in pod.log()


@pytest.mark.parametrize("service", ["runtime", "gateway"])
async def test_a_lone_process_on_a_port_in_use_fails_to_start(
    service: str, runtime: Proc, base_env: dict[str, str], pods: list[Proc]
) -> None:
    """Only a pod's children share a port (TETHER_SHARED_PORT, set by the supervisor). A lone
    runtime or gateway started on the address of a running one exits, instead of binding beside
    it with SO_REUSEPORT and silently taking part of its connections (two test servers that
    drew the same free port once split each other's calls: a README run saw "invalid token")."""
    holder = runtime if service == "runtime" else start_gateway(base_env, runtime.addr)
    try:
        taken = holder.addr.removeprefix("http://")
        key = "TETHER_GRPC_ADDR" if service == "runtime" else "TETHER_HTTP_ADDR"
        env = {**base_env, key: taken, "TETHER_RUNTIME_TARGET": runtime.addr}
        proc = start_pod(service, 1, env, taken)
        pods.append(proc)
        code = await asyncio.to_thread(proc.popen.wait, 60)
        assert code != 0, proc.log()[-4000:]
        assert grpc_serving(runtime.addr) and (holder is runtime or http_ready(holder.addr))
    finally:
        if holder is not runtime:
            holder.terminate()


def _headers(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}", **extra}


async def _open_run_stream(base: str) -> SseReader:
    """A new connection (its own session) that starts a long run and follows its SSE."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    async with session.post(f"{base}/v1/conversations", json={}, headers=_headers()) as r:
        assert r.status == 201, await r.text()
        conv = (await r.json())["conversation"]["id"]
    body = {"text": "stream 400 deltas", "idempotencyKey": uuid.uuid4().hex}
    async with session.post(
        f"{base}/v1/conversations/{conv}/runs", json=body, headers=_headers()
    ) as r:
        assert r.status == 201, await r.text()
        run_id = (await r.json())["run"]["id"]
    resp = await session.get(
        f"{base}/v1/runs/{run_id}/events", headers=_headers(Accept="text/event-stream")
    )
    assert resp.status == 200
    reader = SseReader(resp)
    reader.session = session  # type: ignore[attr-defined]  # closed by the test
    return reader


async def test_gateway_processes_share_a_port_and_end_streams_on_drain(
    private_env: dict[str, str], pods: list[Proc], procs: list[Proc]
) -> None:
    # 400 deltas 50 ms apart: every run still streaming when the gateway pod is stopped.
    slow = {**private_env, "TETHER_SCRIPTED_DELAY_S": "0.05", "TETHER_COALESCE_MS": "0"}
    runtime = await asyncio.to_thread(start_runtime, slow, name="runtime-for-pod")
    procs.append(runtime)
    port, metrics = free_port(), f"127.0.0.1:{free_port()}"
    base = f"http://127.0.0.1:{port}"
    env = {
        **private_env,
        "TETHER_HTTP_ADDR": f"127.0.0.1:{port}",
        "TETHER_RUNTIME_TARGET": runtime.addr,
        "TETHER_METRICS_ADDR": metrics,
        "TETHER_SSE_HEARTBEAT_S": "1",
    }
    pod = start_pod("gateway", 2, env, base)
    pods.append(pod)
    await asyncio.to_thread(wait_for, pod, lambda: len(children_of(pod.pid)) == 2)
    await asyncio.to_thread(wait_for, pod, lambda: http_ready(base))
    await asyncio.to_thread(
        wait_for, pod, lambda: scrape(metrics)["tether_pod_process_up"] == {"0": 1, "1": 1}
    )
    readers = await asyncio.gather(*(_open_run_stream(base) for _ in range(12)))
    try:
        for reader in readers:
            first = await reader.next(timeout=20)
            assert first is not None and first.kind in ("event", "retry", "comment")
        seen = scrape(metrics)
        opened = seen["tether_gateway_sse_connections"]
        # 12 connections of their own: the kernel put some on each gateway process.
        assert opened.get("0", 0) > 0 and opened.get("1", 0) > 0, opened
        kids = children_of(pod.pid)
        stop = asyncio.create_task(
            asyncio.to_thread(stop_pod, pod, kids, float(env["TETHER_DRAIN_S"]) + 10)
        )
        # Every stream, on either process, is ended by the drain (clients reconnect elsewhere).
        for reader in readers:
            while await reader.next(timeout=15) is not None:
                pass
            assert not any(f.event == "done" for f in reader.frames)
        await stop
    finally:
        for reader in readers:
            reader.resp.close()
            await reader.session.close()  # type: ignore[attr-defined]
