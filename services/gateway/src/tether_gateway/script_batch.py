"""The gateway's Lua script calls to Redis (the rate limit's check, a stream slot's acquire and
release), one pipeline a round trip: the calls that arrive while one round trip is in flight go
together in the next one, as one pipeline of EVALSHA (through a cluster, concurrent calls: each
to the master of its key's slot). A server that does not know a script yet (first use, a
restart, a failover) gets it by EVAL, which caches it there.

A burst of 200 starts on one pod waited 244 ms on average for its rate-limit checks, one round
trip each; and a short run made three round trips of its own (its check, its stream slot's
acquire and its release), each a write and a wake-up, where together with the other runs' they
share one. (A streaming start now makes its check and its acquire one call, stream_slots.py.)

Each round trip is bounded by `timeout_s` (one timer a round trip, not one a call): one that
runs out fails its calls, and those queued behind it at once (Redis is slow: they are not made
to wait a bound of their own). A call thus waits at most the round trip in flight when it came
and its own: two bounds. What a failed call means is its caller's (the rate limit fails open, a
slot is counted on the pod)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError
from tether_common.redis_round_trip import RoundTrip


@dataclass(frozen=True)
class Script:
    """A Lua script, called by its digest (the server hashes and parses nothing). Its keys
    share one hash tag (a cluster runs a script on one slot)."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


_Call = tuple[Script, tuple[str, ...], Sequence[Any], "asyncio.Future[Any]"]


class ScriptBatch:
    """The calls waiting for one Redis client; see the module's docstring."""

    def __init__(self, redis: Any, timeout_s: float) -> None:
        self.redis = redis
        self.timeout_s = timeout_s
        # One round trip at a time (one _drain task): on a connection of its own, not through
        # redis-py's pipeline (redis_round_trip.py). A cluster's calls go to several masters.
        self._trip = None if isinstance(redis, RedisCluster) else RoundTrip(redis)
        self._queue: list[_Call] = []
        self._task: asyncio.Task[None] | None = None

    def call(self, script: Script, key: str | tuple[str, ...], *args: Any) -> asyncio.Future[Any]:
        """The script's answer, or the error its call met (its round trip's timeout included).
        `key`: its one key, or its keys in order."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        keys = (key,) if isinstance(key, str) else key
        self._queue.append((script, keys, args, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="redis-script-calls")
        return done

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._answer(batch)
            except Exception as err:  # noqa: BLE001 - every waiting call fails with it
                if isinstance(err, TimeoutError):
                    batch, self._queue = batch + self._queue, []
                for *_, done in batch:
                    if not done.done():
                        done.set_exception(err)

    async def _answer(self, batch: list[_Call]) -> None:
        results = await self._evalsha(batch)
        for (script, keys, args, done), result in zip(batch, results, strict=True):
            if isinstance(result, NoScriptError):
                try:
                    result = await self.redis.eval(script.source, len(keys), *keys, *args)
                except Exception as err:  # noqa: BLE001 - this call's own failure
                    result = err
            if done.done():
                continue
            if isinstance(result, BaseException):
                done.set_exception(result)
            else:
                done.set_result(result)

    async def _evalsha(self, batch: list[_Call]) -> list[Any]:
        """Each call's answer, or the error it met (NoScriptError included)."""
        if self._trip is None:
            # redis-py refuses EVALSHA in a cluster pipeline: one call each, concurrently (the
            # client sends each to its key's master).
            calls = (self.redis.evalsha(s.sha, len(k), *k, *args) for s, k, args, _ in batch)
            return list(await asyncio.gather(*calls, return_exceptions=True))
        return await self._trip.send(
            [("EVALSHA", script.sha, len(keys), *keys, *args) for script, keys, args, _ in batch]
        )


class ScriptBatches:
    """One batch per Redis client and bound, shared by whoever calls with both (the gateway's
    rate limiter and stream slots: their calls go in the same round trips)."""

    def __init__(self) -> None:
        self._batches: dict[tuple[int, float], ScriptBatch] = {}

    def of(self, redis: Any, timeout_s: float) -> ScriptBatch:
        key = (id(redis), timeout_s)
        batch = self._batches.get(key)
        if batch is None or batch.redis is not redis:  # a client replaced at the same address
            batch = self._batches[key] = ScriptBatch(redis, timeout_s)
        return batch
