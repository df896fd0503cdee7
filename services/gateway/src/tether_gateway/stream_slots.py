"""A cap on the SSE streams one user holds open across every gateway pod: each open stream is a
member of the user's sorted set in Redis, scored by the time its lease ends. The pod refreshes
the leases of its own streams on a timer (one pipeline per tick, not one task per stream), so a
pod that crashes stops refreshing and its streams stop counting within one lease.

If Redis does not answer, the cap falls back to this pod's own count of the user's streams
(fail to the pod, not open): one pod's memory is what the cap protects, and that it can still
count locally. A user may then hold up to the cap on each pod until Redis is back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tether_common.errors import RateLimited

from tether_gateway.ratelimit import CLOCK_LUA, GCRA_LUA, RateGate
from tether_gateway.script_batch import Script, ScriptBatches

log = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 0.25
RETRY_AFTER_S = 5.0
_WARN_EVERY_S = 10.0

# Expired leases (a crashed pod's) go first; then the member joins the user's set if the user
# holds fewer than `cap`. Returns 1 (joined) or 0.
ACQUIRE_LUA = """
local function acquire(key, member, cap, lease)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= cap then return 0 end
  redis.call('ZADD', key, now + lease, member)
  redis.call('PEXPIRE', key, lease)
  return 1
end
"""
# KEYS[1] = the user's set; ARGV = member, cap, lease ms.
_ACQUIRE = Script(
    CLOCK_LUA
    + ACQUIRE_LUA
    + "return acquire(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]))"
)
# A start's rate limit and its stream's slot in one call: KEYS = the user's rate-limit key, the
# user's set (one hash tag, the user's); ARGV = interval ms, burst ms, member, cap, lease ms.
# Returns {ms to wait, 0} when the rate limit refuses (no slot taken), else {0, joined}.
_LIMITED_ACQUIRE = Script(
    CLOCK_LUA
    + GCRA_LUA
    + ACQUIRE_LUA
    + """
local wait = gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
if wait > 0 then return {wait, 0} end
return {0, acquire(KEYS[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]))}
"""
)
# KEYS[1] = the user's set; ARGV[1] = the member. A script (not a bare ZREM) to share the
# acquires' and the rate limit's round trips (script_batch.py).
_RELEASE = Script("return redis.call('ZREM', KEYS[1], ARGV[1])")
# KEYS[1] = the user's set; ARGV = lease ms, members. Moves the members' leases forward (XX:
# only those still present) and the set's own expiry with them.
_REFRESH = Script(
    CLOCK_LUA
    + """
local lease = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], lease)
return 0
"""
)
REFRESH_TIMEOUT_S = 2.0  # a whole pod's leases in one round trip: a bound of its own


def _key(user_id: str) -> str:
    return f"tether:streams:{{{user_id}}}"


class StreamSlots:
    """Acquire a slot before a stream opens (RateLimited past the cap), release it when it ends."""

    def __init__(
        self,
        cap: int,
        lease_s: float,
        *,
        timeout_s: float = REDIS_TIMEOUT_S,
        batches: ScriptBatches | None = None,
    ) -> None:
        self.cap = cap
        self.timeout_s = timeout_s  # a round trip longer than this: the pod counts its own only
        self._batches = batches or ScriptBatches()
        self.lease_ms = max(1000, int(lease_s * 1000))
        self._held: dict[str, str] = {}  # slot id -> user id, this pod's open streams
        self._warned_at = 0.0

    def local_count(self, user_id: str) -> int:
        return sum(1 for user in self._held.values() if user == user_id)

    async def acquire(self, redis: Any, user_id: str, gate: RateGate | None = None) -> str | None:
        """A slot id to release later; None when the cap is off (nothing to release). `gate`:
        the request's rate limit (RateLimiter.gate), checked first, in the same call: refused,
        it raises its RateLimited and no slot is taken."""
        if self.cap <= 0:
            if gate is not None:
                await gate.check(redis)
            return None
        slot = uuid.uuid4().hex
        joined: int | None = None
        wait_ms = 0
        if redis is not None:
            batch = self._batches.of(redis, self.timeout_s)
            try:  # bounded by the batch's round trip
                if gate is None:
                    joined = await batch.call(
                        _ACQUIRE, _key(user_id), slot, self.cap, self.lease_ms
                    )
                else:
                    keys = (gate.key, _key(user_id))
                    args = (*gate.args, slot, self.cap, self.lease_ms)
                    wait_ms, joined = await batch.call(_LIMITED_ACQUIRE, keys, *args)
            except Exception as err:  # noqa: BLE001 - any Redis failure: count on this pod
                self._warn(err)
                if gate is not None:
                    gate.failed(err)  # and the rate limit lets the request through
        if gate is not None:
            gate.answer(wait_ms)
        if joined is None:
            joined = int(self.local_count(user_id) < self.cap)
        if not int(joined):
            raise RateLimited(
                f"too many open event streams: at most {self.cap} per user",
                retry_after_s=RETRY_AFTER_S,
            )
        self._held[slot] = user_id
        return slot

    @contextlib.asynccontextmanager
    async def held(
        self, redis: Any, user_id: str, *, wanted: bool = True, gate: RateGate | None = None
    ) -> AsyncIterator[str | None]:
        """The slot of a stream being set up (None when not `wanted` or the cap is off): taken
        first, so a caller at the cap starts nothing it could not watch, and released if the
        block raises. On success the block has handed it to sse.stream_response, which releases
        it when the stream ends (a second release is a no-op). `gate`: the request's rate limit,
        checked before, with the slot's acquire in one call (acquire)."""
        if wanted:
            slot = await self.acquire(redis, user_id, gate)
        else:
            slot = None
            if gate is not None:
                await gate.check(redis)
        try:
            yield slot
        except BaseException:
            await self.release(redis, slot)
            raise

    async def release(self, redis: Any, slot: str | None) -> None:
        """Give the slot back; a slot already released (or None) is a no-op."""
        if slot is None:
            return
        user_id = self._held.pop(slot, None)
        if user_id is None or redis is None:
            return
        try:
            await self._batches.of(redis, self.timeout_s).call(_RELEASE, _key(user_id), slot)
        except Exception as err:  # noqa: BLE001 - the lease ends it anyway
            self._warn(err)

    async def refresh(self, redis: Any) -> None:
        """Extend the leases of every stream this pod holds open (one round trip: the users' calls
        queue together in the batch of the refresh's bound)."""
        if redis is None or not self._held:
            return
        by_user: dict[str, list[str]] = {}
        for slot, user_id in self._held.items():
            by_user.setdefault(user_id, []).append(slot)
        batch = self._batches.of(redis, max(self.timeout_s, REFRESH_TIMEOUT_S))
        calls = (
            batch.call(_REFRESH, _key(u), self.lease_ms, *slots) for u, slots in by_user.items()
        )
        for result in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(result, Exception):  # retried on the next tick
                self._warn(result)
                return

    async def run_refresher(self, redis_of: Any, every_s: float) -> None:
        """Refresh until cancelled; `redis_of()` is read each tick (the client can be replaced)."""
        while True:
            await asyncio.sleep(every_s)
            with contextlib.suppress(Exception):
                await self.refresh(redis_of())

    def _warn(self, err: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "stream cap counted on this pod only: Redis unavailable (%s)", type(err).__name__
            )
