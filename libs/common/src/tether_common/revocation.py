"""Revoked tokens: a `jti` deny-list in Redis (`tether:revoked:{jti}`, kept for the token's
remaining lifetime) and a pub/sub channel, so every pod learns of a revocation at once. Each pod
checks its in-memory copy (no Redis round trip per request), loaded when it (re)connects to
Redis and kept current by the channel."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster

from tether_common import redis_conn
from tether_common.backoff import NO_JITTER, Backoff, Retries
from tether_common.errors import Unavailable

log = logging.getLogger(__name__)

CHANNEL = "tether:revoked"
KEY_PREFIX = "tether:revoked:"
MAX_JTI_CHARS = 256
_RECONNECT = Backoff(0.2, 2.0, jitter=NO_JITTER)
_PRUNE_EVERY_S = 60.0
_LOAD_BATCH = 500

Listener = Callable[[str], None]


class Revocations:
    """One process's copy of the deny-list: jti -> when the token expires anyway (after that
    the entry is useless, the token being refused as expired)."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._listeners: list[Listener] = []
        self.synced = asyncio.Event()  # set once loaded from Redis (tests and readiness)

    def is_revoked(self, jti: str | None) -> bool:
        if not jti:
            return False
        until = self._until.get(jti)
        if until is None:
            return False
        if until <= time.time():
            del self._until[jti]
            return False
        return True

    def on_revoked(self, listener: Listener) -> None:
        """`listener(jti)` runs for every revocation this process learns of (its own too)."""
        self._listeners.append(listener)

    def _learn(self, jti: str, until: float) -> None:
        if until <= time.time() or not jti:
            return
        known = jti in self._until
        self._until[jti] = max(until, self._until.get(jti, 0.0))
        if not known:
            for listener in self._listeners:
                listener(jti)

    def prune(self) -> None:
        now = time.time()
        for jti in [j for j, until in self._until.items() if until <= now]:
            del self._until[jti]

    async def revoke(self, redis: Any, jti: str, expires_at: float) -> None:
        """Deny `jti` until `expires_at` on every pod. Without Redis (a single dev process) only
        here; a Redis that cannot take it is UNAVAILABLE (the caller retries the sign-out)."""
        if not jti or len(jti) > MAX_JTI_CHARS:
            return
        ttl = int(expires_at - time.time()) + 1
        if ttl <= 0:
            return  # expired already: nothing left to deny
        if redis is not None:
            try:
                await _record(redis, jti, expires_at, ttl)
            except Exception as err:  # noqa: BLE001 - any Redis failure: the sign-out is retried
                raise Unavailable("could not record the revocation; retry") from err
        self._learn(jti, expires_at)

    async def follow(self, redis_of: Callable[[], Any]) -> None:
        """Keep this copy current until cancelled: subscribe, then load the whole list (in that
        order, so nothing revoked in between is missed), then apply each message. A lost
        connection is re-established and the list loaded again."""
        reconnects = Retries(_RECONNECT)
        while True:
            redis = redis_of()
            if redis is None:
                self.synced.set()
                return
            try:
                await redis_conn.ready(redis)
                async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    await self._load(redis)
                    self.synced.set()
                    reconnects.reset()
                    await self._listen(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("revocation channel lost (%s); reconnecting", type(err).__name__)
                await reconnects.pause()
                with contextlib.suppress(Exception):  # a cluster whose master died: its replica
                    await redis_conn.refresh_slots(redis)

    async def _load(self, redis: Any) -> None:
        batch: list[str] = []
        async for raw_key in redis.scan_iter(match=KEY_PREFIX + "*", count=_LOAD_BATCH):
            batch.append(raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key))
            if len(batch) >= _LOAD_BATCH:
                await self._load_batch(redis, batch)
                batch = []
        if batch:
            await self._load_batch(redis, batch)

    async def _load_batch(self, redis: Any, keys: list[str]) -> None:
        for key, value in zip(keys, await redis_conn.mget(redis, keys), strict=True):
            until = _float(value)  # None: expired between the scan and the read
            if until is not None:
                self._learn(key.removeprefix(KEY_PREFIX), until)

    async def _listen(self, pubsub: Any) -> None:
        """Apply each message until the connection is lost. A connection that goes silent (half
        open: no FIN, no RST) is given up within seconds (redis_conn.SilenceWatch), and `follow`
        subscribes again and reloads the list: before, a pod could sit on a dead subscription and
        accept revoked tokens until it restarted."""
        pruned = time.monotonic()
        with redis_conn.SilenceWatch(pubsub) as watch:
            while True:
                message = await watch.read()  # one at least each PING_S: the PING's answer
                if message is not None and message.get("type") == "message":
                    data = message.get("data")
                    text = data.decode() if isinstance(data, bytes) else str(data)
                    jti, _, until = text.rpartition(" ")
                    value = _float(until)
                    if jti and value is not None:
                        self._learn(jti, value)
                if time.monotonic() - pruned > _PRUNE_EVERY_S:
                    self.prune()
                    pruned = time.monotonic()


async def _record(redis: Any, jti: str, expires_at: float, ttl: int) -> None:
    if isinstance(redis, RedisCluster):
        # The key and the channel live in different slots, so no MULTI spans them; the key first:
        # a pod that hears the message finds the key, and one that loads meanwhile finds it too.
        # Classic PUBLISH (not SPUBLISH): a cluster forwards it to every node, and revocations are
        # rare enough that the broadcast costs nothing.
        await redis.set(KEY_PREFIX + jti, str(expires_at), ex=ttl)
        await redis.publish(CHANNEL, f"{jti} {expires_at}")
        return
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(KEY_PREFIX + jti, str(expires_at), ex=ttl)
        pipe.publish(CHANNEL, f"{jti} {expires_at}")
        await pipe.execute()


def _float(value: object) -> float | None:
    if isinstance(value, bytes):
        value = value.decode()
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
