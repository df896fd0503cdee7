"""One place that turns REDIS_URL into a client: a plain `redis.asyncio.Redis`, or, when the URL's
scheme is `redis+cluster://` (`rediss+cluster://` with TLS), a `RedisCluster` seeded from the
listed nodes (`redis+cluster://h1:6379,h2:6379`). The scheme rather than a second setting, so the
one value that names the store also says what it is, and a plain URL keeps working unchanged.

The helpers below paper over the few commands that differ: a cluster spans many slots, so a
multi-key read is split by slot, and after a failover the client's map of slots is refreshed
before a subscriber reconnects (a pub/sub connection never sees the MOVED that would refresh it)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from tether_common import tcp_liveness
from tether_common.quiet_clock import QuietClock

log = logging.getLogger(__name__)

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


# What a call may raise while the store is unwell: a cluster client's "no node answers" and
# "slot not covered" are not RedisErrors.
ERRORS = (RedisError, RedisClusterException, OSError)

# An idle subscriber connection hears nothing, so silence alone proves nothing: after PING_S
# without a word from Redis a subscriber sends a PING, and a connection that has answered nothing
# for SILENT_S is dead (a partition, a NAT that forgot it, a frozen server; no FIN, no RST).
# TCP's own limits (tether_common.tcp_liveness) end it too, later, and not at all where something
# on the way still acknowledges what it no longer forwards.
PING_S = 1.0
SILENT_S = 3.0


class SilentConnection(ConnectionError):
    """A subscriber connection that answered nothing for SILENT_S, even to a PING."""


class SilenceWatch:
    """A pub/sub reader's liveness check, held around the reader's loop:

        with SilenceWatch(pubsub) as watch:
            while True:
                message = await watch.read()  # a PING's answer included

    After PING_S without a word from Redis a PING goes out (and again each PING_S while the
    quiet lasts); once nothing was heard for SILENT_S, the read raises SilentConnection, and the
    reader drops the connection and dials again (the bus's subscribers, the revocation follower).
    The watch keeps one timer (quiet_clock) and arms none per read: a busy runtime's bus reads
    many messages per run. Only the task that entered the watch may read through it."""

    def __init__(self, pubsub: Any, ping_s: float = PING_S, silent_s: float = SILENT_S) -> None:
        self.ping_s = ping_s
        self.silent_s = silent_s
        self._pubsub = pubsub
        self._clock = QuietClock(ping_s, self._quiet)
        self._reader: asyncio.Task[Any] | None = None
        self._reading = False
        self._given_up: float | None = None  # the quiet after which the connection was given up
        self._pings: set[asyncio.Task[None]] = set()

    def __enter__(self) -> SilenceWatch:
        self._reader = asyncio.current_task()
        self._clock.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._clock.close()
        for ping in self._pings:
            ping.cancel()

    async def read(self) -> dict[str, Any] | None:
        """The next message, waiting as long as the connection lives; None for one redis-py
        keeps to itself (a health check's answer)."""
        self._raise_if_given_up()
        self._reading = True
        try:
            message: dict[str, Any] | None = await self._pubsub.get_message(timeout=None)
        except asyncio.CancelledError:
            # Our own cancel (the quiet lasted SILENT_S) unless someone else's came too.
            assert self._reader is not None
            if self._given_up is not None and self._reader.uncancel() == 0:
                self._raise_if_given_up()
            raise
        finally:
            self._reading = False
        self._clock.heard()
        return message

    def _raise_if_given_up(self) -> None:
        if self._given_up is not None:
            raise SilentConnection(f"no word from Redis in {self._given_up:.1f}s")

    def _quiet(self, quiet_s: float) -> float | None:
        if quiet_s >= self.silent_s:
            self._given_up = quiet_s
            if self._reading and self._reader is not None:
                self._reader.cancel()
            return None
        ping = asyncio.ensure_future(self._ping())
        self._pings.add(ping)
        ping.add_done_callback(self._pings.discard)
        return min(quiet_s + self.ping_s, self.silent_s)

    async def _ping(self) -> None:
        """Sent beside the read (redis-py writes a subscribed connection's commands without
        reading their answer): the PONG comes back through `read`. A PING that fails proves
        nothing the read will not find out itself."""
        try:
            await self._pubsub.ping()
        except ERRORS as err:
            log.debug("pub/sub PING failed: %r", err)


def silent_peer_options(url: str) -> dict[str, Any]:
    """Client options that end a connection whose peer went silent within seconds
    (tether_common.tcp_liveness): for a TCP URL, none for a Unix socket's."""
    if urlsplit(url).scheme == "unix":
        return {}
    return {"socket_keepalive": True, "socket_keepalive_options": tcp_liveness.tcp_options()}


def is_cluster(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def connect(url: str, **options: Any) -> Any:
    """A client for `url` (`options`: socket timeouts and the like, passed to either kind).
    Typed Any as the app's other Redis handles are: redis' generics in every signature cost more
    than they check."""
    if not is_cluster(url):
        return aioredis.Redis.from_url(url, **options)
    return RedisCluster(**cluster_options(url), **options)


def cluster_options(url: str) -> dict[str, Any]:
    """RedisCluster's arguments for a `redis+cluster://[user:password@]host:port[,host:port…]`."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES[parts.scheme]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if parts.path not in ("", "/", "/0"):
        # A cluster has only database 0: silently using it would mix with what expected another.
        raise ValueError("REDIS_URL: a Redis Cluster has only database 0")
    seeds = []
    for host_port in hosts.split(","):
        host, _, port = host_port.strip().rpartition(":")
        if not host:
            host, port = port, "6379"
        seeds.append(ClusterNode(host.strip("[]"), int(port)))
    options: dict[str, Any] = {"startup_nodes": seeds}
    if user:
        options["username"] = unquote(user)
    if password:
        options["password"] = unquote(password)
    if scheme == "rediss":
        options["ssl"] = True
    return options


async def mget(client: Any, keys: list[str]) -> list[Any]:
    """MGET of keys that may sit in different slots (split per slot on a cluster)."""
    if isinstance(client, RedisCluster):
        return list(await client.mget_nonatomic(keys))
    return list(await client.mget(keys))


async def ready(client: Any) -> None:
    """Load a cluster client's slot map if it has none yet (a no-op for a plain Redis, and for a
    cluster client once loaded): its pub/sub picks a node by that map and fails without it."""
    if isinstance(client, RedisCluster):
        await client.initialize()


async def refresh_slots(client: Any) -> None:
    """Re-read which node owns which slot (a no-op for a plain Redis). After a master died, its
    replica owns its slots; a subscriber that reconnected by the stale map would try the dead
    node until something else happened to refresh it."""
    if isinstance(client, RedisCluster):
        await client.nodes_manager.initialize()
