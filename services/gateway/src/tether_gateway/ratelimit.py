"""Per-user limits on every route that costs the runtime work (starting, resuming and cancelling
runs, creating conversations, opening event streams, minting stream tokens), kept in Redis so every gateway pod counts the
same budget: GCRA in one Lua script (atomic, one small key per user and action). The checks go
to Redis in the gateway's shared round trips (script_batch.py), with the stream slots' calls; a
streaming start's check is made in its slot's script (RateGate, StreamSlots.held): one call.

If Redis does not answer, the request is let through and a warning is logged (fail open). The
limit is a brake on abuse and runaway clients, not a safety property: authentication, ownership,
idempotency and the tool gate are all enforced by the runtime whatever happens here, and failing
closed would turn a Redis outage into "nobody can approve the restart they are waiting on"."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from tether_common.config import Settings
from tether_common.errors import RateLimited

from tether_gateway.script_batch import Script, ScriptBatches

log = logging.getLogger(__name__)

Action = Literal["start", "resume", "conversation", "events", "stream_token", "cancel"]
PERIOD_MS = 60_000
REDIS_TIMEOUT_S = 0.25  # a slow Redis must not slow every start/resume down
_WARN_EVERY_S = 10.0

# Redis' clock, in ms (so pods with skewed clocks agree): `now` for the functions below.
CLOCK_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
# GCRA: the key holds the "theoretical arrival time" (ms). A request is allowed while
# tat - burst <= now; then tat moves one interval forward. `interval` = period / limit; `burst` =
# interval * (limit - 1), so `limit` requests may come at once. Returns 0 (allowed, counted) or
# the ms to wait.
GCRA_LUA = """
local function gcra(key, interval, burst)
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local wait = tat - burst - now
  if wait > 0 then return wait end
  local new_tat = tat + interval
  redis.call('SET', key, string.format('%d', new_tat), 'PX', string.format('%d', new_tat - now))
  return 0
end
"""
# KEYS[1] = the user's key; ARGV = interval ms, burst ms.
_GCRA = Script(CLOCK_LUA + GCRA_LUA + "return gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))")


@dataclass(frozen=True)
class Limit:
    per_min: int

    @property
    def interval_ms(self) -> int:
        return max(1, PERIOD_MS // self.per_min)

    @property
    def burst_ms(self) -> int:
        return self.interval_ms * (self.per_min - 1)


@dataclass(frozen=True)
class RateGate:
    """One user's budget for one action, for a caller that checks it in a script of its own
    with other work (StreamSlots: the check and a stream's slot in one call): the script's
    key and arguments (GCRA_LUA's `gcra`), and what its answer means."""

    limiter: RateLimiter
    action: Action
    key: str
    limit: Limit

    @property
    def args(self) -> tuple[int, int]:
        return self.limit.interval_ms, self.limit.burst_ms

    async def check(self, redis: Any) -> None:
        """The check alone (RateLimiter.check)."""
        await self.limiter.check_gate(redis, self)

    def answer(self, wait_ms: Any) -> None:
        """RateLimited (429 + Retry-After) when the script answered a wait."""
        if int(wait_ms) > 0:
            raise RateLimited(
                f"too many {self.action} requests: at most {self.limit.per_min} a minute",
                retry_after_s=int(wait_ms) / 1000,
            )

    def failed(self, err: BaseException) -> None:
        """The script's call failed: the request goes through (fail open), warned."""
        self.limiter.warn(err)


class RateLimiter:
    """Checks one user's budget for one action; raises RateLimited (429 + Retry-After)."""

    def __init__(
        self,
        limits: dict[Action, int],
        *,
        timeout_s: float = REDIS_TIMEOUT_S,
        batches: ScriptBatches | None = None,
    ) -> None:
        self.limits = {action: Limit(n) for action, n in limits.items() if n > 0}
        self.timeout_s = timeout_s  # a round trip longer than this fails its checks open
        self._warned_at = 0.0
        self._batches = batches or ScriptBatches()

    @classmethod
    def from_settings(cls, settings: Settings, batches: ScriptBatches | None = None) -> RateLimiter:
        return cls(
            {
                "start": settings.rate_limit_start_per_min,
                "resume": settings.rate_limit_resume_per_min,
                "conversation": settings.rate_limit_conversation_per_min,
                "events": settings.rate_limit_events_per_min,
                "stream_token": settings.rate_limit_stream_token_per_min,
                "cancel": settings.rate_limit_cancel_per_min,
            },
            batches=batches,
        )

    def gate(self, action: Action, user_id: str) -> RateGate | None:
        """The user's budget for `action`; None when the action is not limited."""
        limit = self.limits.get(action)
        if limit is None:
            return None
        return RateGate(self, action, f"tether:ratelimit:{action}:{{{user_id}}}", limit)

    async def check(self, redis: Any, action: Action, user_id: str) -> None:
        """`redis` is the app's redis.asyncio client (None without Redis: nothing to count in)."""
        gate = self.gate(action, user_id)
        if gate is not None:
            await self.check_gate(redis, gate)

    async def check_gate(self, redis: Any, gate: RateGate) -> None:
        if redis is None:
            return
        batch = self._batches.of(redis, self.timeout_s)
        try:
            # bounded by the batch's round trip
            wait_ms = await batch.call(_GCRA, gate.key, *gate.args)
        except Exception as err:  # noqa: BLE001 - any Redis failure: fail open (module docstring)
            self.warn(err)
            return
        gate.answer(wait_ms)

    def warn(self, err: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:  # one line per outage burst, not per request
            self._warned_at = now
            log.warning("rate limit not enforced: Redis unavailable (%s)", type(err).__name__)
