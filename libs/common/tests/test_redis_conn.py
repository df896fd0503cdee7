"""REDIS_URL -> client: the scheme alone says whether it names a Redis Cluster."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from tether_common import redis_conn, tcp_liveness
from tether_testkit.loop_timers import count_timers


def test_a_plain_url_builds_the_plain_client_as_before() -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://cache:6380/2", "unix:///tmp/redis.sock"):
        assert not redis_conn.is_cluster(url)
        assert type(redis_conn.connect(url)) is aioredis.Redis


def test_a_cluster_url_lists_its_seeds_and_credentials() -> None:
    url = "rediss+cluster://app:p%40ss@redis-0.redis:6379,redis-1.redis:7000,[::1]:7001/0"
    assert redis_conn.is_cluster(url)
    options = redis_conn.cluster_options(url)
    seeds = [(n.host, n.port) for n in options.pop("startup_nodes")]
    assert seeds == [("redis-0.redis", 6379), ("redis-1.redis", 7000), ("::1", 7001)]
    assert options == {"username": "app", "password": "p@ss", "ssl": True}
    assert isinstance(redis_conn.connect("redis+cluster://seed"), RedisCluster)
    assert [
        (n.host, n.port)
        for n in redis_conn.cluster_options("redis+cluster://seed")["startup_nodes"]
    ] == [("seed", 6379)]


def test_a_cluster_has_only_database_zero() -> None:
    with pytest.raises(ValueError, match="only database 0"):
        redis_conn.cluster_options("redis+cluster://seed:6379/3")


async def test_silent_peer_options_give_a_client_socket_the_stores_tcp_liveness(
    redis_url: str,
) -> None:
    """A connection made with them ends within seconds of its peer going silent: its socket
    carries tcp_liveness's TCP_USER_TIMEOUT and keepalive (a Unix socket's client gets none)."""
    client = aioredis.Redis.from_url(redis_url, **redis_conn.silent_peer_options(redis_url))
    try:
        conn = await client.connection_pool.get_connection()
        try:
            sock = conn._writer.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            for option, value in tcp_liveness.tcp_options().items():
                assert sock.getsockopt(socket.IPPROTO_TCP, option) == value
        finally:
            await client.connection_pool.release(conn)
    finally:
        await client.aclose()
    assert redis_conn.silent_peer_options("unix:///tmp/redis.sock") == {}


async def test_a_busy_subscriber_reads_without_arming_a_timer_per_message(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bus reads many messages per run: the watch's reads arm no timer (before, each read
    armed a timeout of PING_S and cancelled it)."""
    client = aioredis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe("tether:test:busy")
        async with client.pipeline(transaction=False) as pipe:
            for i in range(200):
                pipe.publish("tether:test:busy", str(i))
            await pipe.execute()
        with redis_conn.SilenceWatch(pubsub) as watch:
            assert (await watch.read() or {}).get("type") == "subscribe"
            armed = count_timers(monkeypatch)
            got = [(await watch.read() or {}).get("data") for _ in range(200)]
        assert got == [str(i).encode() for i in range(200)]
        assert armed == []
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()


async def test_a_quiet_subscriber_pings_and_reads_the_answer(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe("tether:test:quiet")
        with redis_conn.SilenceWatch(pubsub, ping_s=0.1, silent_s=0.5) as watch:
            assert (await watch.read() or {}).get("type") == "subscribe"
            started = time.monotonic()
            async with asyncio.timeout(2):
                message = await watch.read()
            assert message is not None and message["type"] == "pong"
            assert time.monotonic() - started >= 0.09
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await client.aclose()


class _DeafPubSub:
    """A subscription whose peer went silent: reads never end, PINGs go nowhere."""

    def __init__(self) -> None:
        self.pings = 0

    async def get_message(self, timeout: float | None = 0.0) -> dict[str, Any] | None:
        assert timeout is None  # a blocking read: the watch's one timer bounds it
        await asyncio.Event().wait()
        return None

    async def ping(self) -> bool:
        self.pings += 1
        return True


async def test_a_silent_connection_is_given_up_and_an_outside_cancel_stays_one() -> None:
    deaf = _DeafPubSub()
    started = time.monotonic()
    with pytest.raises(redis_conn.SilentConnection, match="no word from Redis"):
        with redis_conn.SilenceWatch(deaf, ping_s=0.05, silent_s=0.2) as watch:
            await watch.read()
    assert 0.2 <= time.monotonic() - started < 1.0
    assert deaf.pings == 3  # at 0.05, 0.1 and 0.15 s
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    async def reader() -> None:
        with redis_conn.SilenceWatch(_DeafPubSub(), ping_s=0.05, silent_s=10) as watch:
            await watch.read()

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
