"""Webhooks end to end, with real processes and a real HTTP receiver started by the test:

1. a receiver that fails each event's first three attempts gets it on the 4th, with the same
   event id and body, every attempt signed (verified with tether_client.webhooks.verify);
2. a runtime SIGKILLed while a delivery is in flight: the next runtime delivers it again, same
   event id (the receiver deduplicates), and the row ends `delivered`;
3. a dead endpoint (it accepts and never answers) does not delay another endpoint's deliveries,
   even when its backlog is larger than the process's whole delivery concurrency.

Each test has a database of its own: an endpoint receives every run's events."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from tether_client.webhooks import InvalidSignature, verify
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime, tether_cli
from tether_testkit.security import bearer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SECRET = f"whsec-{uuid.uuid4().hex}"  # what the test's receivers verify with
FAST = {
    "TETHER_WEBHOOK_POLL_S": "0.1",
    "TETHER_WEBHOOK_BACKOFF_S": "0.2",
    "TETHER_WEBHOOK_BACKOFF_MAX_S": "1",
    "TETHER_WEBHOOK_TIMEOUT_S": "2",
}


@dataclass
class Hit:
    at: float
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A real HTTP server; `answer(hit, nth attempt of its event id)` decides each response."""

    answer: Callable[[Hit, int], Awaitable[int]]
    hits: list[Hit] = field(default_factory=list)
    url: str = ""

    def by_event(self) -> dict[str, list[Hit]]:
        out: dict[str, list[Hit]] = {}
        for h in self.hits:
            out.setdefault(h.headers["Tether-Event-Id"], []).append(h)
        return out

    async def handle(self, request: web.Request) -> web.Response:
        hit = Hit(time.time(), dict(request.headers), await request.read())
        self.hits.append(hit)
        nth = len(self.by_event()[hit.headers["Tether-Event-Id"]])
        return web.Response(status=await self.answer(hit, nth))


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Receiver], Awaitable[Receiver]]]:
    runners: list[web.AppRunner] = []

    async def start(receiver: Receiver) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", receiver.handle)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        receiver.url = f"http://127.0.0.1:{port}/hook"
        return receiver

    yield start
    for r in runners:
        await r.cleanup()


def add_endpoint(env: dict[str, str], url: str, tmp_path: Path, events: str = "") -> str:
    secret_file = tmp_path / f"secret-{uuid.uuid4().hex[:6]}"
    secret_file.write_text(SECRET + "\n")
    args = ["webhooks", "add", url, "--secret-file", str(secret_file)]
    if events:
        args += ["--events", events]
    out = tether_cli(*args, env=env)
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout + out.stderr
    return out.stdout.split()[1].rstrip(":")


async def pause_run(http: aiohttp.ClientSession, gw: str, db: Any, user: str = "alice") -> str:
    """A run of OpsPilot's, paused at its restart confirmation; returns the run id."""
    service, _ = await abnormal_service(db, prefix="wh")
    async with http.post(f"{gw}/v1/conversations", json={}, headers=bearer(user)) as r:
        conv = (await r.json())["conversation"]["id"]
    body = {"text": f"restart the abnormal {service} instance", "idempotencyKey": uuid.uuid4().hex}
    async with http.post(
        f"{gw}/v1/conversations/{conv}/runs", json=body, headers=bearer(user)
    ) as r:
        assert r.status == 201, await r.text()
        run_id = str((await r.json())["run"]["id"])
    await until(lambda: db.fetchval("SELECT status = 'interrupted' FROM run WHERE id = $1", run_id))
    return run_id


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def verified(hit: Hit) -> dict[str, Any]:
    event = verify(hit.body, hit.headers.get("Tether-Signature"), SECRET)
    assert event["id"] == hit.headers["Tether-Event-Id"]
    assert event["type"] == hit.headers["Tether-Event-Type"]
    return event


@pytest.fixture
async def db(private_env: dict[str, str]) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    assert pool is not None
    yield pool
    await pool.close()


async def test_failing_receiver_gets_each_event_on_the_fourth_attempt_signed(
    private_env: dict[str, str],
    db: asyncpg.Pool,
    serve: Callable[[Receiver], Awaitable[Receiver]],
    procs: list[Proc],
    tmp_path: Path,
) -> None:
    async def fail_three(hit: Hit, nth: int) -> int:
        return 500 if nth <= 3 else 204

    receiver = await serve(Receiver(fail_three))
    env = {**private_env, **FAST}
    endpoint = add_endpoint(env, receiver.url, tmp_path)
    rt = start_runtime(env, name="wh-rt")
    procs.append(rt)
    gw = start_gateway(env, rt.addr, name="wh-gw")
    procs.append(gw)
    async with aiohttp.ClientSession() as http:
        run_id = await pause_run(http, gw.addr, db)
        intr = await db.fetchval(
            "SELECT id FROM interrupt WHERE run_id = $1 AND status = 'pending'", run_id
        )
        body = {"interruptId": intr, "decision": "approve", "idempotencyKey": uuid.uuid4().hex}
        async with http.post(
            f"{gw.addr}/v1/runs/{run_id}/resume", json=body, headers=bearer("alice")
        ) as r:
            assert r.status == 202, await r.text()

    def accepted() -> list[str]:
        return [e for e, hits in receiver.by_event().items() if len(hits) >= 4]

    async def three_accepted() -> bool:
        return len(accepted()) == 3

    await until(three_accepted)
    events = receiver.by_event()
    assert len(events) == 3
    types = set()
    for event_id, hits in events.items():
        assert len(hits) == 4, f"{event_id}: {len(hits)} attempts"  # none after the 2xx
        assert [h.headers["Tether-Delivery-Attempt"] for h in hits] == ["1", "2", "3", "4"]
        assert len({h.body for h in hits}) == 1  # the same body every time
        parsed = [verified(h) for h in hits]
        assert all(p["data"]["runId"] == run_id for p in parsed)
        types.add(parsed[0]["type"])
        # The backoff grows between attempts (0.2 s base, +-50 % jitter, doubling).
        gaps = [b.at - a.at for a, b in zip(hits, hits[1:], strict=False)]
        assert all(g >= 0.09 for g in gaps), gaps
    assert types == {"interrupt.raised", "interrupt.resolved", "run.completed"}
    raised = next(
        verified(h[0]) for h in events.values() if verified(h[0])["type"] == "interrupt.raised"
    )
    assert raised["data"]["interruptId"] == intr
    assert raised["data"]["userId"] == "alice"
    # A signature made with another secret, or over another body, is refused.
    hit = next(iter(events.values()))[0]
    with pytest.raises(InvalidSignature):
        verify(hit.body, hit.headers["Tether-Signature"], "another-secret-entirely")
    with pytest.raises(InvalidSignature):
        verify(hit.body + b" ", hit.headers["Tether-Signature"], SECRET)
    # The state is visible to an operator; the secret is never shown nor logged.
    await until(
        lambda: db.fetchval(
            "SELECT count(*) = 3 FROM webhook_delivery WHERE endpoint_id = $1 "
            "AND status = 'delivered' AND attempts = 4",
            endpoint,
        )
    )
    listing = tether_cli("webhooks", "list", env=env)
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith(endpoint))
    assert row.split()[-3:] == ["0", "3", "0"]  # pending, delivered, dead
    deliveries = tether_cli("webhooks", "deliveries", "--endpoint", endpoint, env=env)
    assert deliveries.stdout.count("delivered") == 3
    for text in (listing.stdout, deliveries.stdout, rt.log(), gw.log()):
        assert SECRET not in text


async def test_runtime_killed_mid_delivery_the_next_one_delivers_same_event_id(
    private_env: dict[str, str],
    db: asyncpg.Pool,
    serve: Callable[[Receiver], Awaitable[Receiver]],
    procs: list[Proc],
    tmp_path: Path,
) -> None:
    got_first = asyncio.Event()
    release = asyncio.Event()

    async def hang_first(hit: Hit, nth: int) -> int:
        if nth == 1:
            got_first.set()
            await release.wait()  # the runtime is killed while this request is open
        return 200

    receiver = await serve(Receiver(hang_first))
    # Attempts time out after 3 s: a row's lease is 2 x 3 + 1 = 7 s from its claim.
    env = {**private_env, **FAST, "TETHER_WEBHOOK_TIMEOUT_S": "3"}
    endpoint = add_endpoint(env, receiver.url, tmp_path, events="interrupt.raised")
    rt = start_runtime(env, name="wh-kill-rt")
    procs.append(rt)
    gw = start_gateway(env, rt.addr, name="wh-kill-gw")
    procs.append(gw)
    async with aiohttp.ClientSession() as http:
        await pause_run(http, gw.addr, db)
    await asyncio.wait_for(got_first.wait(), 30)
    rt.kill()  # SIGKILL mid-delivery: no answer recorded, the row stays leased
    row = await db.fetchrow("SELECT * FROM webhook_delivery WHERE endpoint_id = $1", endpoint)
    assert row["status"] == "pending" and row["attempts"] == 1
    rt2 = start_runtime(env, name="wh-kill-rt2")
    procs.append(rt2)

    async def delivered() -> bool:
        return bool(
            await db.fetchval(
                "SELECT status = 'delivered' FROM webhook_delivery WHERE endpoint_id = $1",
                endpoint,
            )
        )

    await until(delivered, timeout=30)
    release.set()
    events = receiver.by_event()
    assert len(events) == 1
    ((event_id, hits),) = events.items()
    assert len(hits) == 2  # at least once: the receiver saw it twice, under one id
    assert [verified(h)["id"] for h in hits] == [event_id, event_id]
    assert hits[0].body == hits[1].body
    assert [h.headers["Tether-Delivery-Attempt"] for h in hits] == ["1", "2"]
    # The second attempt waited for the first's lease (2 x 3 s + 1 s) to pass.
    assert hits[1].at - hits[0].at >= 6.0


async def test_dead_endpoint_does_not_delay_another(
    private_env: dict[str, str],
    db: asyncpg.Pool,
    serve: Callable[[Receiver], Awaitable[Receiver]],
    procs: list[Proc],
    tmp_path: Path,
) -> None:
    never = asyncio.Event()

    async def hang(hit: Hit, nth: int) -> int:
        await never.wait()
        return 200

    async def ok(hit: Hit, nth: int) -> int:
        return 200

    dead = await serve(Receiver(hang))
    healthy = await serve(Receiver(ok))
    # Room for 4 attempts in the whole process, 2 per endpoint: the dead endpoint's backlog
    # (one event per run) must never take the healthy endpoint's slots.
    env = {
        **private_env,
        **FAST,
        "TETHER_WEBHOOK_TIMEOUT_S": "20",
        "TETHER_WEBHOOK_MAX_IN_FLIGHT": "4",
        "TETHER_WEBHOOK_PER_ENDPOINT": "2",
    }
    add_endpoint(env, dead.url, tmp_path, events="interrupt.raised")
    add_endpoint(env, healthy.url, tmp_path, events="interrupt.raised")
    rt = start_runtime(env, name="wh-dead-rt")
    procs.append(rt)
    gw = start_gateway(env, rt.addr, name="wh-dead-gw")
    procs.append(gw)
    runs = 6
    async with aiohttp.ClientSession() as http:
        for _ in range(runs):
            await pause_run(http, gw.addr, db)

    async def all_healthy() -> bool:
        return len(healthy.by_event()) == runs

    await until(all_healthy, timeout=20)
    lags = []
    for hits in healthy.by_event().values():
        event = verified(hits[0])
        created = datetime.fromisoformat(event["createdAt"].replace("Z", "+00:00"))
        lags.append(hits[0].at - created.timestamp())
    # Each reached the healthy endpoint promptly, while the dead one still holds its two.
    assert max(lags) < 3.0, lags
    assert len(dead.hits) == 2, len(dead.hits)
    never.set()
