"""Per-user limits on every route that costs the runtime work (starting, resuming and cancelling
runs, creating conversations, opening event streams, minting stream tokens), kept in Redis so every gateway pod counts the
same budget: GCRA in one Lua script (atomic, one small key per user and action). The checks that
arrive while one round trip is in flight go together in the next one (one pipeline of EVALSHA):
a burst of 200 starts on one pod waited 244 ms on average for its checks, one round trip each,
and many timed out (failing open).

If Redis does not answer, the request is let through and a warning is logged (fail open). The
limit is a brake on abuse and runaway clients, not a safety property: authentication, ownership,
idempotency and the tool gate are all enforced by the runtime whatever happens here, and failing
closed would turn a Redis outage into "nobody can approve the restart they are waiting on"."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError
from tether_common.config import Settings
from tether_common.errors import RateLimited

log = logging.getLogger(__name__)

Action = Literal["start", "resume", "conversation", "events", "stream_token", "cancel"]
PERIOD_MS = 60_000
REDIS_TIMEOUT_S = 0.25  # a slow Redis must not slow every start/resume down
_WARN_EVERY_S = 10.0

# GCRA: the key holds the "theoretical arrival time" (ms, Redis' clock so pods with skewed clocks
# agree). A request is allowed while tat - burst <= now; then tat moves one interval forward.
# KEYS[1] = the user's key; ARGV[1] = interval ms (period / limit); ARGV[2] = burst ms
# (interval * (limit - 1), so `limit` requests may come at once). Returns 0 or ms to wait.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local wait = tat - burst - now
if wait > 0 then return wait end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', string.format('%d', new_tat - now))
return 0
"""


@dataclass(frozen=True)
class Limit:
    per_min: int

    @property
    def interval_ms(self) -> int:
        return max(1, PERIOD_MS // self.per_min)

    @property
    def burst_ms(self) -> int:
        return self.interval_ms * (self.per_min - 1)


class RateLimiter:
    """Checks one user's budget for one action; raises RateLimited (429 + Retry-After)."""

    def __init__(self, limits: dict[Action, int], *, timeout_s: float = REDIS_TIMEOUT_S) -> None:
        self.limits = {action: Limit(n) for action, n in limits.items() if n > 0}
        self.timeout_s = timeout_s  # longer than this, the check fails open
        self._warned_at = 0.0
        self._batches: dict[int, _Batch] = {}  # by Redis client (id): one pipeline at a time each

    @classmethod
    def from_settings(cls, settings: Settings) -> RateLimiter:
        return cls(
            {
                "start": settings.rate_limit_start_per_min,
                "resume": settings.rate_limit_resume_per_min,
                "conversation": settings.rate_limit_conversation_per_min,
                "events": settings.rate_limit_events_per_min,
                "stream_token": settings.rate_limit_stream_token_per_min,
                "cancel": settings.rate_limit_cancel_per_min,
            }
        )

    async def check(self, redis: Any, action: Action, user_id: str) -> None:
        """`redis` is the app's redis.asyncio client (None without Redis: nothing to count in)."""
        limit = self.limits.get(action)
        if limit is None or redis is None:
            return
        key = f"tether:ratelimit:{action}:{{{user_id}}}"
        batch = self._batches.get(id(redis))
        if batch is None or batch.redis is not redis:
            batch = self._batches[id(redis)] = _Batch(redis, self.timeout_s)
        try:
            wait_ms = await batch.check(key, limit)  # bounded by the batch's round trip
        except Exception as err:  # noqa: BLE001 - any Redis failure: fail open (module docstring)
            self._warn(err)
            return
        if int(wait_ms) > 0:
            raise RateLimited(
                f"too many {action} requests: at most {limit.per_min} a minute",
                retry_after_s=int(wait_ms) / 1000,
            )

    def _warn(self, err: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:  # one line per outage burst, not per request
            self._warned_at = now
            log.warning("rate limit not enforced: Redis unavailable (%s)", type(err).__name__)


_GCRA_SHA = hashlib.sha1(_GCRA.encode()).hexdigest()


class _Batch:
    """The checks waiting for one Redis client: whatever queued while a round trip was in flight
    goes in the next one, as one pipeline of EVALSHA (through a cluster, concurrent calls: each to
    the master of its key's slot). A server that does not know the script yet (first use, a
    restart, a failover) gets it by EVAL, which caches it there.

    Each round trip is bounded by `timeout_s` (one timer a round trip, not one a check): one that
    runs out fails its checks open, and those queued behind it at once (Redis is slow: they are
    not made to wait a bound of their own). A check thus waits at most the round trip in flight
    when it came and its own: two bounds, where a `wait_for` per check gave one."""

    def __init__(self, redis: Any, timeout_s: float) -> None:
        self.redis = redis
        self.timeout_s = timeout_s
        self._queue: list[tuple[str, Limit, asyncio.Future[int]]] = []
        self._task: asyncio.Task[None] | None = None

    def check(self, key: str, limit: Limit) -> asyncio.Future[int]:
        """Milliseconds to wait (0: allowed)."""
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append((key, limit, done))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="rate-limit-checks")
        return done

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._answer(batch)
            except Exception as err:  # noqa: BLE001 - every waiting check fails open
                if isinstance(err, TimeoutError):
                    batch, self._queue = batch + self._queue, []
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(err)

    async def _answer(self, batch: list[tuple[str, Limit, asyncio.Future[int]]]) -> None:
        results = await self._evalsha(batch)
        for (key, limit, done), result in zip(batch, results, strict=True):
            if isinstance(result, NoScriptError):
                result = await self.redis.eval(_GCRA, 1, key, limit.interval_ms, limit.burst_ms)
            if isinstance(result, BaseException):
                raise result
            if not done.done():
                done.set_result(int(result))

    async def _evalsha(self, batch: list[tuple[str, Limit, asyncio.Future[int]]]) -> list[Any]:
        """Each check's answer, or the error it met (NoScriptError included)."""
        if isinstance(self.redis, RedisCluster):
            # redis-py refuses EVALSHA in a cluster pipeline: one call each, concurrently (the
            # client sends each to its key's master).
            calls = (
                self.redis.evalsha(_GCRA_SHA, 1, key, limit.interval_ms, limit.burst_ms)
                for key, limit, _ in batch
            )
            return list(await asyncio.gather(*calls, return_exceptions=True))
        async with self.redis.pipeline(transaction=False) as pipe:
            for key, limit, _ in batch:
                pipe.evalsha(_GCRA_SHA, 1, key, limit.interval_ms, limit.burst_ms)
            return list(await pipe.execute(raise_on_error=False))
