"""Per-user limits on starting and resuming runs hold across gateway pods (they count in Redis):
two gateways, requests alternating between them, the request past the limit gets 429 with
Retry-After; another user is unaffected. A Redis outage lets requests through (fail open)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from tether_common.errors import RateLimited
from tether_gateway.ratelimit import RateLimiter
from tether_testkit.loop_timers import count_timers
from tether_testkit.processes import Proc, free_port, start_gateway
from tether_testkit.redis_round_trips import count_round_trips
from tether_testkit.security import bearer, new_user, owned_interrupted_run

LIMIT_ENV = {"TETHER_RATE_LIMIT_START_PER_MIN": "5", "TETHER_RATE_LIMIT_RESUME_PER_MIN": "3"}


@pytest.fixture(scope="module")
def limited(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    env = {**base_env, **LIMIT_ENV}
    a = start_gateway(env, runtime.addr, name="gateway-limit-a")
    b = start_gateway(env, runtime.addr, name="gateway-limit-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


async def conversation(http, base: str, user: str) -> str:
    async with http.post(f"{base}/v1/conversations", json={}, headers=bearer(user)) as r:
        assert r.status == 201
        return str((await r.json())["conversation"]["id"])


async def test_start_limit_holds_across_gateways(limited, http, db):
    a, b = limited
    user, other = new_user("rl"), new_user("rl")
    conv = await conversation(http, a, user)
    for i in range(5):
        base = (a, b)[i % 2]
        body = {"text": f"hello {i}"}
        async with http.post(
            f"{base}/v1/conversations/{conv}/runs", json=body, headers=bearer(user)
        ) as r:
            assert r.status == 201, f"request {i + 1} on {base}: {await r.text()}"
    runs = await db.fetchval("SELECT count(*) FROM run WHERE user_id = $1", user)
    async with http.post(
        f"{b}/v1/conversations/{conv}/runs", json={"text": "one more"}, headers=bearer(user)
    ) as r:
        assert r.status == 429, await r.text()
        retry_after = int(r.headers["Retry-After"])
        error = (await r.json())["error"]
    assert error["code"] == "RATE_LIMITED" and error["message"]
    assert 1 <= retry_after <= 12  # 5 a minute: the next slot opens within 60/5 s
    assert await db.fetchval("SELECT count(*) FROM run WHERE user_id = $1", user) == runs

    other_conv = await conversation(http, b, other)  # conversations are not limited
    async with http.post(
        f"{a}/v1/conversations/{other_conv}/runs", json={"text": "hi"}, headers=bearer(other)
    ) as r:
        assert r.status == 201, "another user paid for the first one's requests"


async def test_resume_limit_holds_across_gateways(limited, http):
    a, b = limited
    user = new_user("rl")
    body = {"interruptId": "int_x", "decision": "approve", "idempotencyKey": uuid.uuid4().hex}
    # Every attempt counts, found or not: the limit brakes guessing and runaway retries alike.
    for i in range(3):
        async with http.post(
            f"{(a, b)[i % 2]}/v1/runs/run_nope/resume", json=body, headers=bearer(user)
        ) as r:
            assert r.status == 404, await r.text()
    async with http.post(f"{b}/v1/runs/run_nope/resume", json=body, headers=bearer(user)) as r:
        assert r.status == 429
        assert 1 <= int(r.headers["Retry-After"]) <= 20
        assert (await r.json())["error"]["code"] == "RATE_LIMITED"
    async with http.post(
        f"{a}/v1/runs/run_nope/resume", json=body, headers=bearer(new_user())
    ) as r:
        assert r.status == 404


async def test_limiter_counts_in_redis_and_fails_open(redis_url, caplog):
    user = f"unit-{uuid.uuid4().hex}"
    limiter = RateLimiter({"start": 2, "resume": 0}, timeout_s=10.0)
    client = redis_asyncio.Redis.from_url(redis_url)
    try:
        await limiter.check(client, "start", user)
        await limiter.check(client, "start", user)
        with pytest.raises(RateLimited) as info:
            await limiter.check(client, "start", user)
        assert 29 <= info.value.retry_after_s <= 30
        for _ in range(10):
            await limiter.check(client, "resume", user)  # 0: this limit is off
        ttl = await client.pttl(f"tether:ratelimit:start:{{{user}}}")
        assert 0 < ttl <= 60_000  # the key goes away once the budget is whole again
    finally:
        await client.aclose()

    dead = redis_asyncio.Redis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2
    )
    try:
        with caplog.at_level(logging.WARNING, logger="tether_gateway.ratelimit"):
            for _ in range(5):
                await limiter.check(dead, "start", user)  # no Redis: let through
        warnings = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
        assert len(warnings) == 1, "one warning per outage burst, not one per request"
    finally:
        await dead.aclose()


async def test_concurrent_checks_share_a_round_trip_and_count_exactly(redis_url, monkeypatch):
    """Checks that arrive together go to Redis in one round trip, and the budget still holds to
    the request: of 30 concurrent starts with a limit of 5, exactly 5 pass."""
    user = f"unit-{uuid.uuid4().hex}"
    # Counting is what this test checks, not the 0.25 s fail-open deadline: on a loaded machine the
    # first round trip (NOSCRIPT, then EVAL) has taken longer than that and let all 30 through.
    limiter = RateLimiter({"start": 5}, timeout_s=10.0)
    client = redis_asyncio.Redis.from_url(redis_url)
    trips = count_round_trips(client, monkeypatch)
    try:
        await client.script_flush()  # the first round trip meets NOSCRIPT and falls back to EVAL

        async def one() -> bool:
            try:
                await limiter.check(client, "start", user)
            except RateLimited:
                return False
            return True

        passed = await asyncio.gather(*(one() for _ in range(30)))
        assert sum(passed) == 5
        assert trips == [30], trips  # one round trip for all 30
        more = await asyncio.gather(*(one() for _ in range(3)))
        assert sum(more) == 0 and trips == [30, 3]  # the script is known now: EVALSHA
    finally:
        await client.aclose()
    assert limiter._warned_at == 0.0, "no check failed open"


async def test_a_round_trip_arms_one_timer_whatever_the_number_of_checks(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is the round trip's, not each check's: 30 checks that share a round trip arm one
    timer for it, not one each. (A client with a socket timeout, as the gateway's, arms its own
    per answer read besides: this one has none, so only the limiter's are counted.) Only timers
    armed in tasks these checks make count: the session's loop also runs other fixtures' tasks
    (a CI run once counted one of theirs, due 0.2 s later, beside the limiter's)."""
    limiter = RateLimiter({"start": 100}, timeout_s=10.0)
    client = redis_asyncio.Redis.from_url(redis_url, socket_timeout=None)
    try:
        await limiter.check(client, "start", f"unit-{uuid.uuid4().hex}")  # the script loaded
        before = asyncio.all_tasks()
        armed = count_timers(monkeypatch, armed_in=lambda t: t is not None and t not in before)
        await asyncio.gather(
            *(limiter.check(client, "start", f"unit-{uuid.uuid4().hex}") for _ in range(30))
        )
        assert len(armed) == 1, armed
    finally:
        await client.aclose()
    assert limiter._warned_at == 0.0, "no check failed open"


async def test_checks_fail_open_within_the_bound_when_redis_never_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis that accepts and never answers: the round trip in flight and every check queued
    behind it are let through within the bound, not one bound after another."""
    held: list[asyncio.StreamWriter] = []

    async def accept_and_stay_silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)

    server = await asyncio.start_server(accept_and_stay_silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    silent = redis_asyncio.Redis.from_url(f"redis://127.0.0.1:{port}/0")
    limiter = RateLimiter({"start": 1}, timeout_s=0.3)
    try:
        first = asyncio.create_task(limiter.check(silent, "start", "u"))
        await asyncio.sleep(0.1)  # its round trip in flight; these queue behind it
        t0 = asyncio.get_running_loop().time()
        with caplog.at_level(logging.WARNING, logger="tether_gateway.ratelimit"):
            await asyncio.gather(first, *(limiter.check(silent, "start", "u") for _ in range(5)))
        assert asyncio.get_running_loop().time() - t0 < 0.5  # the first's bound, not a second
        assert "Redis unavailable (TimeoutError)" in caplog.text
    finally:
        await silent.aclose()
        for w in held:
            w.close()
        server.close()


# Finding 5: every route that costs the runtime work has a per-user budget, shared by the pods.
OTHER_LIMITS = {
    "TETHER_RATE_LIMIT_CONVERSATION_PER_MIN": "2",
    "TETHER_RATE_LIMIT_EVENTS_PER_MIN": "2",
    "TETHER_RATE_LIMIT_STREAM_TOKEN_PER_MIN": "2",
    "TETHER_RATE_LIMIT_CANCEL_PER_MIN": "2",
}


@pytest.fixture(scope="module")
def limited_routes(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    env = {**base_env, **OTHER_LIMITS}
    a = start_gateway(env, runtime.addr, name="gateway-limit-routes-a")
    b = start_gateway(env, runtime.addr, name="gateway-limit-routes-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


@pytest.mark.parametrize("route", ["conversation", "events", "stream_token", "cancel"])
async def test_every_costly_route_is_limited_per_user_across_gateways(
    limited_routes, http, db, route
):
    a, b = limited_routes
    user, other = new_user("rl" + route[:3]), new_user("rl" + route[:3])
    # The run (and its conversation) exist before the budget is spent: conversation creation is
    # itself limited, so the other routes get their own user's fresh budget for it.
    ids = {} if route == "conversation" else await owned_interrupted_run(db, a, http, user)

    def request(base: str, who: str) -> Any:
        h = bearer(who)
        if route == "conversation":
            return http.post(f"{base}/v1/conversations", json={}, headers=h)
        url = f"{base}/v1/runs/{ids['run']}"
        if route == "events":
            return http.get(f"{url}/events", headers=h)
        if route == "stream_token":
            return http.post(f"{url}/stream-token", json={}, headers=h)
        return http.post(f"{url}/cancel", json={}, headers=h)

    before = await db.fetchval("SELECT count(*) FROM conversation WHERE user_id = $1", user)
    for i in range(2):
        async with request((a, b)[i % 2], user) as r:
            assert r.status < 300, f"request {i + 1}: {r.status} {await r.text()}"
    async with request(b, user) as r:
        assert r.status == 429, await r.text()
        assert 1 <= int(r.headers["Retry-After"]) <= 31  # 2 a minute
        assert (await r.json())["error"]["code"] == "RATE_LIMITED"
    if route == "conversation":  # the refused request created nothing
        after = await db.fetchval("SELECT count(*) FROM conversation WHERE user_id = $1", user)
        assert after == before + 2
    # Another user's budget is their own.
    if route == "conversation":
        async with request(a, other) as r:
            assert r.status == 201
