"""REDIS_URL -> client: the scheme alone says whether it names a Redis Cluster."""

from __future__ import annotations

import socket

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from tether_common import redis_conn, tcp_liveness


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
