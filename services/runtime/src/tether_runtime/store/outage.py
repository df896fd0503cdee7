"""Waiting out a store outage: capped, jittered retries within a window.

The pause stays short (at most MAX_PAUSE_S) however long the outage lasts, so a caller notices
the store's return within that much of it; an uncapped exponential backoff grown during a 5 s
restart would sleep seconds past it. The jitter keeps the processes' retries out of step, so the
returning server is not met by all of them at the same instant."""

from __future__ import annotations

import asyncio
import random
import time

FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 0.25


class Outage:
    """One outage as one caller sees it: `await pause()` after each failure; False once the
    window (`ride_out_s` from the first failure) is spent, and the caller gives up."""

    def __init__(self, ride_out_s: float) -> None:
        self.deadline = time.monotonic() + ride_out_s
        self._pause = FIRST_PAUSE_S
        self.retries = 0

    async def pause(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(left, random.uniform(0.5, 1.0) * self._pause))
        self._pause = min(self._pause * 2, MAX_PAUSE_S)
        self.retries += 1
        return True
