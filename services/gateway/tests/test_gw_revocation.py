"""The revoked-token list against a real Redis: two processes' copies (two `Revocations`) learn a
revocation from the channel, a copy started later loads it, and a copy whose connection is
killed loads what it missed when it reconnects. Also the in-process index of open streams."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from tether_common.revocation import KEY_PREFIX, Revocations
from tether_gateway.stream_grants import StreamGrants, reauthenticate_frame
from tether_testkit.fault_proxy import FaultProxy
from tether_testkit.revocation_following import following

REDIS_URL = os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
async def redis() -> AsyncIterator[Any]:
    client = redis_asyncio.Redis.from_url(REDIS_URL, socket_connect_timeout=1.0)
    try:
        await client.ping()
    except Exception as err:  # noqa: BLE001
        pytest.fail(f"these tests need Redis at {REDIS_URL}: {err}")
    yield client
    await client.aclose()


async def until(check: Any, within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.01)


async def test_every_copy_learns_a_revocation_and_a_late_one_loads_it(redis: Any) -> None:
    a, b = Revocations(), Revocations()
    heard: list[str] = []
    b.on_revoked(heard.append)
    jti = uuid.uuid4().hex
    async with following(a, redis), following(b, redis):
        await a.revoke(redis, jti, time.time() + 60)
        assert a.is_revoked(jti)
        await until(lambda: b.is_revoked(jti), within_s=10)
        assert heard.count(jti) == 1, "each revocation is heard once"
    ttl = await redis.ttl(KEY_PREFIX + jti)
    assert 0 < ttl <= 61, "kept only for the token's remaining lifetime"
    late = Revocations()
    async with following(late, redis):
        assert late.is_revoked(jti)
    assert not late.is_revoked("another")


async def test_a_reconnecting_copy_loads_what_it_missed(redis: Any) -> None:
    # Every connection of the follower carries this name: only those are killed (the Redis
    # is shared with other tests' processes).
    name = f"revfollow-{uuid.uuid4().hex[:12]}"
    own = redis_asyncio.Redis.from_url(REDIS_URL, socket_connect_timeout=1.0, client_name=name)
    follower = Revocations()
    try:
        async with following(follower, own):
            # Kill the follower's connections (as a Redis restart would), then revoke.
            mine = [c for c in await redis.client_list() if c.get("name") == name]
            assert any("subscribe" in c.get("cmd", "") for c in mine), mine
            for c in mine:
                await redis.client_kill_filter(_id=c["id"], skipme=False)
            jti = uuid.uuid4().hex
            await Revocations().revoke(redis, jti, time.time() + 60)
            await until(lambda: follower.is_revoked(jti), within_s=15)
    finally:
        await own.aclose()


async def test_an_expired_entry_is_forgotten(redis: Any) -> None:
    revocations = Revocations()
    jti = uuid.uuid4().hex
    await revocations.revoke(None, jti, time.time() + 0.2)
    assert revocations.is_revoked(jti)
    await asyncio.sleep(0.3)
    assert not revocations.is_revoked(jti)
    await revocations.revoke(None, "gone", time.time() - 1)
    assert not revocations.is_revoked("gone")


class Stream:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def reauthenticate(self, reason: str) -> None:
        self.reasons.append(reason)


async def test_streams_end_at_expiry_or_on_revocation_of_any_of_their_tokens() -> None:
    grants = StreamGrants(leeway_s=0)
    expiring, revoked, other = Stream(), Stream(), Stream()
    soon, later = time.time() + 0.1, time.time() + 60
    grants.watch(expiring, ("e",), soon)
    grants.watch(revoked, ("stream-jti", "session-jti"), later)
    grants.watch(other, ("o",), later)
    assert grants.timers() == 2  # one per distinct expiry, shared by its streams
    grants.revoked("session-jti")  # the login a stream token was minted with
    await asyncio.sleep(0.3)
    assert expiring.reasons == ["expired"]
    assert revoked.reasons == ["revoked"]
    assert other.reasons == []
    assert grants.timers() == 1  # the expired one is gone
    grants.forget(revoked, ("stream-jti", "session-jti"), later)
    assert grants.timers() == 1  # `other` still waits on it
    grants.forget(other, ("o",), later)
    assert grants.timers() == 0  # its last stream left: the timer is cancelled
    grants.forget(expiring, ("e",), soon)
    assert len(grants) == 0
    assert reauthenticate_frame("revoked") == (
        b'event: reauthenticate\ndata: {"type":"reauthenticate","reason":"revoked"}\n\n'
    )


async def test_a_copy_on_a_silent_connection_dials_again_and_loads(redis: Any) -> None:
    """The follower's subscription goes dark (a partition or a NAT that forgot it: no FIN, no
    RST; new connections work). It gives the connection up within seconds, subscribes again and
    reloads the list, so a revocation made meanwhile is refused here too. Before, it read the dark
    connection for good and this pod accepted the revoked token until it restarted."""
    url = urllib.parse.urlsplit(REDIS_URL)
    proxy = FaultProxy((url.hostname or "127.0.0.1", url.port or 6379)).start()
    own = redis_asyncio.Redis.from_url(
        f"redis://{proxy.addr}{url.path}", socket_connect_timeout=1.0, socket_timeout=2.0
    )
    follower = Revocations()
    try:
        async with following(follower, own):
            assert proxy.silence_open() > 0
            jti = uuid.uuid4().hex
            await Revocations().revoke(redis, jti, time.time() + 60)
            await until(lambda: follower.is_revoked(jti), within_s=15)
    finally:
        await own.aclose()
        proxy.stop()
