"""Waiting out a store outage: capped, jittered retries within a window.

The pause stays short (at most MAX_PAUSE_S) however long the outage lasts, so a caller notices
the store's return within that much of it; an uncapped exponential backoff grown during a 5 s
restart would sleep seconds past it. The jitter keeps the processes' retries out of step, so the
returning server is not met by all of them at the same instant."""

from __future__ import annotations

from tether_common.backoff import HALF_JITTER, Backoff, Retries

FIRST_PAUSE_S = 0.05
MAX_PAUSE_S = 0.25
RIDE_OUT = Backoff(FIRST_PAUSE_S, MAX_PAUSE_S, jitter=HALF_JITTER)


class Outage(Retries):
    """One outage as one caller sees it: `await pause()` after each failure; False once the
    window (`ride_out_s` from the first failure) is spent, and the caller gives up."""

    def __init__(self, ride_out_s: float) -> None:
        super().__init__(RIDE_OUT, ride_out_s)
