"""The one backoff policy every retry loop uses: exponential pauses from `first_s`, at most
`cap_s`, each scaled by a random factor (jitter) and, with a deadline, never past it.

The jitter keeps processes that failed together from retrying in step; the cap keeps a pause
grown through a long outage from sleeping far past the other side's return. Clock, sleep and
random are injectable, so tests need no wall clock."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Random = Callable[[float, float], float]  # random.uniform's shape
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

# The jitter, as the range of the factor a pause is scaled by.
FULL_JITTER = (0.0, 1.0)  # anywhere up to the pause (AWS's "full jitter")
HALF_JITTER = (0.5, 1.0)  # at least half of it: never much shorter than planned
NO_JITTER = (1.0, 1.0)


@dataclass(frozen=True)
class Backoff:
    """Pause n (n >= 1 failures in a row) is min(cap_s, first_s * multiplier ** (n - 1)) times a
    factor drawn from `jitter`, again at most `cap_s` (a factor above 1 cannot pass the cap)."""

    first_s: float
    cap_s: float = math.inf
    multiplier: float = 2.0
    jitter: tuple[float, float] = FULL_JITTER

    def __post_init__(self) -> None:
        low, high = self.jitter
        if self.first_s < 0 or self.cap_s < 0 or self.multiplier < 1 or not 0 <= low <= high:
            raise ValueError(f"not a backoff: {self}")

    def delay(self, failures: int, rand: Random | None = None) -> float:
        """The pause after the `failures`-th failure in a row (from 1)."""
        try:
            grown = self.first_s * self.multiplier ** max(failures - 1, 0)
        except OverflowError:  # a loop that retries forever: thousands of failures
            grown = math.inf
        low, high = self.jitter
        factor = low if low == high else (rand or random.uniform)(low, high)
        return min(self.cap_s, min(self.cap_s, grown) * factor)

    async def pause(
        self, failures: int, *, left_s: float = math.inf, sleep: Sleep | None = None
    ) -> None:
        """Sleeps the `failures`-th pause, never longer than `left_s` (what is left of a
        deadline the caller keeps)."""
        await (sleep or asyncio.sleep)(min(self.delay(failures), max(0.0, left_s)))


class Retries:
    """One caller's failures in a row under a `Backoff`: `await pause()` after each; False,
    without pausing, once `deadline_s` (from the start, or the last `reset()`) is spent, and
    the caller gives up. No deadline: it never gives up. A pause never runs past the deadline."""

    def __init__(
        self,
        policy: Backoff,
        deadline_s: float | None = None,
        *,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        rand: Random | None = None,
    ) -> None:
        self.policy = policy
        self.deadline_s = deadline_s
        self._clock = clock or time.monotonic
        # Looked up when used, not bound here: a test that patches asyncio.sleep still sees it.
        self._sleep = sleep
        self._rand = rand
        self.failures = 0
        self._deadline = self._from_now()

    def _from_now(self) -> float:
        return math.inf if self.deadline_s is None else self._clock() + self.deadline_s

    def reset(self) -> None:
        """A success: the next failure starts again from the first pause and a whole window."""
        self.failures = 0
        self._deadline = self._from_now()

    def next_delay(self) -> float | None:
        """Counts a failure: the pause before the next try, or None once the deadline is spent."""
        left = self._deadline - self._clock()
        if left <= 0:
            return None
        self.failures += 1
        return min(left, self.policy.delay(self.failures, self._rand))

    async def pause(self) -> bool:
        delay = self.next_delay()
        if delay is None:
            return False
        await (self._sleep or asyncio.sleep)(delay)
        return True
