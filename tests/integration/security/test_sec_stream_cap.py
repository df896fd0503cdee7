"""A cap on one user's open SSE streams holds across gateway pods (the streams count in Redis):
two gateways share one runtime and one Redis; past the cap every pod answers 429 with
Retry-After, a streaming start at the cap starts no run, a closed stream frees its slot, and a
crashed pod's streams stop counting once their leases run out. Without Redis each pod still caps
its own streams."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from tether_common.errors import RateLimited
from tether_gateway.ratelimit import RateLimiter
from tether_gateway.script_batch import ScriptBatches
from tether_gateway.stream_slots import StreamSlots
from tether_testkit.processes import Proc, free_port, start_gateway
from tether_testkit.redis_round_trips import count_round_trips
from tether_testkit.security import bearer, new_user, owned_interrupted_run

CAP = 3
CAP_ENV = {"TETHER_MAX_STREAMS_PER_USER": str(CAP), "TETHER_SSE_HEARTBEAT_S": "0.5"}


@pytest.fixture(scope="module")
def capped(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    env = {**base_env, **CAP_ENV}
    a = start_gateway(env, runtime.addr, name="gateway-cap-a")
    b = start_gateway(env, runtime.addr, name="gateway-cap-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


@contextlib.asynccontextmanager
async def opened(http: Any, base: str, run_id: str, user: str) -> AsyncIterator[Any]:
    """An SSE request whose headers have arrived; the connection closes on exit."""
    resp = await http.get(f"{base}/v1/runs/{run_id}/events", headers=bearer(user))
    try:
        yield resp
    finally:
        resp.close()  # drops the connection, as a closed browser tab would


async def open_until(http: Any, base: str, run_id: str, user: str, within_s: float) -> Any:
    """Retry an open until a slot is free (the gateway notices a closed client on its next
    write, a heartbeat at most); the open response, or the last 429 when none came in time."""
    deadline = time.monotonic() + within_s
    while True:
        resp = await http.get(f"{base}/v1/runs/{run_id}/events", headers=bearer(user))
        if resp.status == 200 or time.monotonic() > deadline:
            return resp
        resp.close()
        await asyncio.sleep(0.1)


async def test_cap_holds_across_gateways_and_a_closed_stream_frees_its_slot(
    capped, http, db, runtime, base_env, procs, redis_client
):
    a, b = capped
    user, other = new_user("cap"), new_user("cap")
    ids = await owned_interrupted_run(db, a, http, user)
    run_id = ids["run"]
    async with contextlib.AsyncExitStack() as stack:
        held = []
        for base in (a, b, a):  # the cap counts on every pod at once
            resp = await stack.enter_async_context(opened(http, base, run_id, user))
            assert resp.status == 200, await resp.text()
            held.append(resp)
        for base in (a, b):
            async with opened(http, base, run_id, user) as resp:
                assert resp.status == 429, "past the cap"  # (a stream's body never ends)
                assert 1 <= int(resp.headers["Retry-After"]) <= 10
                error = (await resp.json())["error"]
                assert error["code"] == "RATE_LIMITED" and "streams" in error["message"]

        # A streaming start needs a slot before it starts anything: no run comes of it.
        runs = await db.fetchval("SELECT count(*) FROM run WHERE user_id = $1", user)
        async with http.post(
            f"{b}/v1/conversations/{ids['conv']}/runs",
            json={"text": "hello"},
            headers={**bearer(user), "Accept": "text/event-stream"},
        ) as resp:
            assert resp.status == 429, "past the cap"  # (a stream's body never ends)
        assert await db.fetchval("SELECT count(*) FROM run WHERE user_id = $1", user) == runs

        # Another user's budget is their own.
        theirs = await owned_interrupted_run(db, b, http, other)
        async with opened(http, a, theirs["run"], other) as resp:
            assert resp.status == 200

        # Closing the one on b lets a new one open on a, and only one.
        held[1].close()
        resp = await open_until(http, a, run_id, user, within_s=5)
        stack.callback(resp.close)
        assert resp.status == 200, "a closed stream's slot was never freed"
        async with opened(http, b, run_id, user) as resp:
            assert resp.status == 429

    # Every stream above is closed: each pod notices at its next write and frees the slot (the
    # streams' heartbeats tick at different moments, so wait for all of them, not for timing).
    deadline = time.monotonic() + 5
    while await redis_client.zcard(f"tether:streams:{{{user}}}") and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert await redis_client.zcard(f"tether:streams:{{{user}}}") == 0, "closed streams kept slots"

    # A pod that crashes holding a stream: its lease runs out (three heartbeats) and the slot
    # with it, though nobody released it.
    c = start_gateway({**base_env, **CAP_ENV}, runtime.addr, name="gateway-cap-c")
    procs.append(c)
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(CAP - 1):  # the streams above free their slots at their next heartbeat
            resp = await open_until(http, a, run_id, user, within_s=5)
            stack.callback(resp.close)
            assert resp.status == 200
        crashed = await http.get(f"{c.addr}/v1/runs/{run_id}/events", headers=bearer(user))
        assert crashed.status == 200, await crashed.text()
        c.kill()
        async with opened(http, a, run_id, user) as resp:
            assert resp.status == 429, "the crashed pod's stream should still count at first"
        resp = await open_until(http, a, run_id, user, within_s=10)
        stack.callback(resp.close)
        assert resp.status == 200, "a crashed pod's stream kept its slot past its lease"
        crashed.close()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Any]:
    client = redis_asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def test_slots_count_in_redis_and_fall_back_to_the_pod(redis_client):
    user = f"unit-{uuid.uuid4().hex}"
    pod_a, pod_b = (
        StreamSlots(2, lease_s=30, timeout_s=10.0),
        StreamSlots(2, lease_s=30, timeout_s=10.0),
    )
    first = await pod_a.acquire(redis_client, user)
    await pod_b.acquire(redis_client, user)
    with pytest.raises(RateLimited) as info:
        await pod_a.acquire(redis_client, user)
    assert info.value.retry_after_s > 0
    await pod_a.release(redis_client, first)
    await pod_b.acquire(redis_client, user)  # the released slot is free again
    assert 0 < await redis_client.pttl(f"tether:streams:{{{user}}}") <= 30_000

    assert (
        await StreamSlots(0, lease_s=30, timeout_s=10.0).acquire(redis_client, user) is None
    )  # 0: no cap

    # Leases: a pod that refreshes keeps its slots, one that stopped (crashed) loses them.
    user = f"unit-{uuid.uuid4().hex}"
    alive, crashed = (
        StreamSlots(2, lease_s=1, timeout_s=10.0),
        StreamSlots(2, lease_s=1, timeout_s=10.0),
    )
    await alive.acquire(redis_client, user)
    await crashed.acquire(redis_client, user)
    for _ in range(4):
        await asyncio.sleep(0.4)
        await alive.refresh(redis_client)
    await alive.acquire(redis_client, user)  # the crashed pod's slot expired
    with pytest.raises(RateLimited):
        await alive.acquire(redis_client, user)  # the refreshed ones did not

    # Without Redis: this pod's own streams are still capped.
    dead = redis_asyncio.Redis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.2
    )
    try:
        pod = StreamSlots(2, lease_s=30, timeout_s=10.0)
        slot = await pod.acquire(dead, user)
        await pod.acquire(dead, user)
        with pytest.raises(RateLimited):
            await pod.acquire(dead, user)
        await pod.release(dead, slot)
        await pod.acquire(dead, user)
    finally:
        await dead.aclose()


async def test_a_stream_set_up_in_held_gives_its_slot_back_if_the_setup_fails(redis_client):
    """StreamSlots.held, the one prelude of every streaming handler (/v1, /langgraph, /agui,
    /ai-sdk): the slot is taken before the setup and returned when the setup raises; a slot
    handed on stays held (its stream releases it), and a second release is a no-op."""
    user = f"unit-{uuid.uuid4().hex}"
    key = f"tether:streams:{{{user}}}"
    slots = StreamSlots(1, lease_s=30, timeout_s=10.0)
    with pytest.raises(RuntimeError, match="setup failed"):
        async with slots.held(redis_client, user) as slot:
            assert slot is not None and await redis_client.zcard(key) == 1
            raise RuntimeError("setup failed")
    assert await redis_client.zcard(key) == 0 and slots.local_count(user) == 0
    async with slots.held(redis_client, user) as handed:
        pass
    assert await redis_client.zcard(key) == 1, "a slot handed to its stream stays held"
    with pytest.raises(RateLimited):  # at the cap: the block does not run
        async with slots.held(redis_client, user):
            raise AssertionError("a setup past the cap ran")
    await slots.release(redis_client, handed)
    await slots.release(redis_client, handed)
    assert await redis_client.zcard(key) == 0
    async with slots.held(redis_client, user, wanted=False) as none:
        assert none is None and await redis_client.zcard(key) == 0


async def test_slots_and_rate_limit_checks_share_their_round_trips(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream's slot (acquire, release) and the rate limit's checks go to Redis together, as
    the gateway sets them up (one ScriptBatches): a start's check, its slot and another stream's
    release that arrive at once are one round trip, not three; each still gets its own answer
    (the cap and the budget hold to the call)."""
    batches = ScriptBatches()
    limiter = RateLimiter({"start": 100}, timeout_s=10.0, batches=batches)
    slots = StreamSlots(2, lease_s=30, timeout_s=10.0, batches=batches)
    client = redis_asyncio.Redis.from_url(redis_url)
    user = f"unit-{uuid.uuid4().hex}"
    try:
        old = await slots.acquire(client, user)  # the scripts are loaded now
        trips = count_round_trips(client, monkeypatch)
        _, new, _ = await asyncio.gather(
            limiter.check(client, "start", user),
            slots.acquire(client, user),
            slots.release(client, old),
        )
        assert trips == [3], trips
        assert await client.zrange(f"tether:streams:{{{user}}}", 0, -1) == [new.encode()]
        await asyncio.gather(slots.acquire(client, user), limiter.check(client, "start", user))
        with pytest.raises(RateLimited):  # the cap of 2, counted in Redis
            await asyncio.gather(slots.acquire(client, user), limiter.check(client, "start", user))
        assert trips == [3, 2, 2], trips
    finally:
        await client.aclose()
    assert limiter._warned_at == 0.0 and slots._warned_at == 0.0, "nothing failed over"


async def test_a_call_that_fails_in_a_shared_round_trip_fails_alone(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One call's error (here a user's slot set that is not a sorted set: the acquire script
    fails on it) is that call's: its acquire counts on the pod, as for a Redis outage, and the
    rate limit's check in the same round trip is answered by Redis."""
    batches = ScriptBatches()
    limiter = RateLimiter({"start": 1}, timeout_s=10.0, batches=batches)
    slots = StreamSlots(2, lease_s=30, timeout_s=10.0, batches=batches)
    client = redis_asyncio.Redis.from_url(redis_url)
    broken, user = f"unit-{uuid.uuid4().hex}", f"unit-{uuid.uuid4().hex}"
    try:
        await client.set(f"tether:streams:{{{broken}}}", "not a sorted set", ex=60)
        await limiter.check(client, "start", user)  # its budget of 1 is spent
        trips = count_round_trips(client, monkeypatch)
        results = await asyncio.gather(
            slots.acquire(client, broken),
            limiter.check(client, "start", user),
            return_exceptions=True,
        )
        assert trips == [2], trips
        assert isinstance(results[0], str) and slots.local_count(broken) == 1  # on the pod
        assert isinstance(results[1], RateLimited)  # Redis answered the check: no fail-open
        assert slots._warned_at > 0.0 and limiter._warned_at == 0.0
    finally:
        await client.aclose()


async def test_a_start_checks_its_rate_limit_and_takes_its_slot_in_one_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A streaming start (the /v1, /langgraph, /agui and /ai-sdk starts) asks Redis once: the
    rate limit's check and the stream's slot in one script (StreamSlots.held with the limiter's
    gate). A start past the cap is refused with the budget counted, as when they were two calls;
    one past the rate limit takes no slot; a start that streams nothing checks the budget alone.
    A call that fails lets the start through on both counts: the budget open, the slot on the
    pod."""
    batches = ScriptBatches()
    limiter = RateLimiter({"start": 3}, timeout_s=10.0, batches=batches)
    slots = StreamSlots(1, lease_s=30, timeout_s=10.0, batches=batches)
    client = redis_asyncio.Redis.from_url(redis_url)
    user = f"unit-{uuid.uuid4().hex}"
    streams = f"tether:streams:{{{user}}}"
    budget = f"tether:ratelimit:start:{{{user}}}"
    try:
        trips = count_round_trips(client, monkeypatch)
        async with slots.held(client, user, gate=limiter.gate("start", user)) as first:
            pass
        assert trips == [1], trips  # one call (a first one's EVAL goes on the pool)
        assert await client.zrange(streams, 0, -1) == [first.encode()]
        assert await client.exists(budget)
        with pytest.raises(RateLimited, match="open event streams"):  # the cap: 1
            async with slots.held(client, user, gate=limiter.gate("start", user)):
                raise AssertionError("a start past the cap ran")
        await slots.release(client, first)
        async with slots.held(client, user, wanted=False, gate=limiter.gate("start", user)) as no:
            assert no is None  # the third start of the minute: no slot wanted, budget spent
        trips.clear()
        with pytest.raises(RateLimited, match="start requests") as refused:
            async with slots.held(client, user, gate=limiter.gate("start", user)):
                raise AssertionError("a start past the rate limit ran")
        assert trips == [1] and refused.value.retry_after_s > 0
        assert await client.zcard(streams) == 0 and slots.local_count(user) == 0
        assert limiter._warned_at == 0.0 and slots._warned_at == 0.0, "nothing failed over"

        broken = f"unit-{uuid.uuid4().hex}"
        await client.set(f"tether:streams:{{{broken}}}", "not a sorted set", ex=60)
        async with slots.held(client, broken, gate=limiter.gate("start", broken)) as local:
            assert local is not None and slots.local_count(broken) == 1  # counted on the pod
        assert limiter._warned_at > 0.0 and slots._warned_at > 0.0
        await slots.release(client, local)
    finally:
        await client.aclose()
