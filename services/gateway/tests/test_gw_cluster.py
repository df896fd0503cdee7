"""The gateway's Redis users against a real Redis Cluster (three masters, one replica each):
rate limits and stream leases (each Lua script on one user's slot, wherever it lives), and the
revoked-token list (keys spread over every master, the channel heard by every pod), including a
killed master whose replica takes over."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.crc import key_slot
from tether_common import redis_conn
from tether_common.errors import RateLimited
from tether_common.revocation import CHANNEL, KEY_PREFIX, Revocations
from tether_gateway.ratelimit import RateLimiter
from tether_gateway.script_batch import ScriptBatches
from tether_gateway.stream_slots import StreamSlots, _key
from tether_testkit.processes import tether_cli
from tether_testkit.redis_cluster import RedisClusterNodes, redis_cluster
from tether_testkit.revocation_following import following

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterNodes]:
    # Shared: the failover test, which leaves a master dead, is the module's last.
    with redis_cluster() as nodes:
        yield nodes


@pytest.fixture
async def client(cluster: RedisClusterNodes) -> AsyncIterator[Any]:
    made = redis_conn.connect(cluster.url, socket_connect_timeout=1.0, socket_timeout=2.0)
    assert await made.ping()  # what /readyz asks
    yield made
    await made.aclose()


def _users_on_every_master(cluster: RedisClusterNodes, key_of: Any) -> list[str]:
    """One user id whose key lands on each master."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < cluster.masters:
        user = f"user-{i}"
        found.setdefault(cluster.master_of(key_of(user)).port, user)
        i += 1
    return list(found.values())


async def test_a_rate_limit_counts_each_user_on_the_master_of_their_slot(
    cluster: RedisClusterNodes, client: Any
) -> None:
    limiter = RateLimiter({"start": 3}, timeout_s=10.0)  # counting is checked, not the deadline
    key = "tether:ratelimit:start:{{{}}}".format
    for user in _users_on_every_master(cluster, key):
        for _ in range(3):
            await limiter.check(client, "start", user)
        with pytest.raises(RateLimited):
            await limiter.check(client, "start", user)
        # The script's one key is on that master, which is what makes EVAL legal in a cluster.
        assert cluster.master_of(key(user)).client().exists(key(user)) == 1
    assert limiter._warned_at == 0.0, "no call failed open"


async def test_stream_leases_cap_each_user_across_masters(
    cluster: RedisClusterNodes, client: Any
) -> None:
    slots = StreamSlots(cap=2, lease_s=30, timeout_s=10.0)
    users = _users_on_every_master(cluster, _key)
    held = {u: [await slots.acquire(client, u), await slots.acquire(client, u)] for u in users}
    for user in users:
        with pytest.raises(RateLimited):
            await slots.acquire(client, user)
    # One pipelined refresh of every user's leases, on three masters.
    await slots.refresh(client)
    for user, (first, _second) in held.items():
        assert key_slot(_key(user).encode()) == key_slot(f"{{{user}}}".encode())
        await slots.release(client, first)
        assert await slots.acquire(client, user)
        assert await client.zcard(_key(user)) == 2
    assert slots._warned_at == 0.0, "no call fell back to counting on this pod"


async def test_a_starts_rate_limit_and_slot_go_in_one_script_on_the_users_master(
    cluster: RedisClusterNodes, client: Any
) -> None:
    """The two keys of a streaming start's one call (its rate limit, its slot) share the user's
    hash tag, so the script runs on one master: no CROSSSLOT on any of them."""
    batches = ScriptBatches()
    limiter = RateLimiter({"start": 2}, timeout_s=10.0, batches=batches)
    slots = StreamSlots(cap=5, lease_s=30, timeout_s=10.0, batches=batches)
    tag = f"one-call-{uuid.uuid4().hex[:8]}-"  # users of their own: the module's cluster is shared
    for user in (tag + u for u in _users_on_every_master(cluster, lambda u: _key(tag + u))):
        for _ in range(2):
            async with slots.held(client, user, gate=limiter.gate("start", user)):
                pass
        with pytest.raises(RateLimited, match="start requests"):
            async with slots.held(client, user, gate=limiter.gate("start", user)):
                raise AssertionError("past the rate limit")
        assert await client.zcard(_key(user)) == 2
    assert limiter._warned_at == 0.0 and slots._warned_at == 0.0, "every call answered"


async def _until(check: Any, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.02)


async def test_tether_revoke_records_on_a_cluster(cluster: RedisClusterNodes, client: Any) -> None:
    jti = uuid.uuid4().hex
    done = await asyncio.to_thread(
        tether_cli, "revoke", jti, "--ttl", "60", env={"REDIS_URL": cluster.url}
    )
    assert done.returncode == 0, done.stderr
    assert 0 < await client.ttl(KEY_PREFIX + jti) <= 61
    follower = Revocations()
    async with following(follower, client):
        assert follower.is_revoked(jti)


async def test_revocations_spread_over_masters_reach_every_copy_through_a_failover(
    cluster: RedisClusterNodes, client: Any
) -> None:
    jtis = [uuid.uuid4().hex for _ in range(30)]
    assert len({cluster.master_of(KEY_PREFIX + j).port for j in jtis}) == cluster.masters
    a, b = Revocations(), Revocations()
    # b's client has never been used, as the runtime's when it starts following: its pub/sub
    # needs the slot map loaded first.
    fresh = redis_conn.connect(cluster.url, socket_connect_timeout=1.0, socket_timeout=2.0)
    async with following(a, client), following(b, fresh):
        for jti in jtis:
            await a.revoke(client, jti, time.time() + 60)
        await _until(lambda: all(b.is_revoked(j) for j in jtis), 10)
        late = Revocations()  # a pod started later loads them all (MGET split by slot)
        async with following(late, client):
            assert all(late.is_revoked(j) for j in jtis)
        # The master the followers' channel connection went to dies; its replica takes over,
        # the followers reconnect by the new slot map and hear what is revoked after.
        victim = cluster.master_of(CHANNEL)
        cluster.kill(victim)
        await asyncio.to_thread(cluster.wait_ok)
        after = uuid.uuid4().hex
        async with asyncio.timeout(20):
            while True:  # the sign-out is retried while the cluster settles, as a user would
                try:
                    await Revocations().revoke(client, after, time.time() + 60)
                    break
                except Exception:  # noqa: BLE001 - Unavailable until the slot map is fresh
                    await asyncio.sleep(0.2)
        await _until(lambda: a.is_revoked(after) and b.is_revoked(after), 20)
    await fresh.aclose()
