"""A deadline counted from the last sign of life, for a reader that hears often.

A reader that gives up on a silent peer used to wrap each read in its own timeout: a timer armed
and cancelled per message (a run's bus messages, a stream's batches), most of them cancelled a
few milliseconds after being armed. A QuietClock keeps ONE timer per reader instead: `heard()`
only notes the time, and the timer, when it fires, re-arms itself from the last time heard if
something came meanwhile. Only a quiet that really lasts reaches `on_quiet`.

`on_quiet(quiet_s)` is called once the peer has been quiet for the first level, and answers
the quiet (in seconds, from the same last word) at which to be called again, or None to stop:
a watch that pings at 1 s and gives up at 3 s answers 2.0, then acts and answers None. Hearing
anything starts a new quiet, counted from the first level again once the timer armed before the
word fires (so a new quiet is told at its first level, or at the latest when the level pending at
the word would have been)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class QuietClock:
    def __init__(self, first_s: float, on_quiet: Callable[[float], float | None]) -> None:
        self.first_s = first_s
        self._on_quiet = on_quiet
        self._heard = time.monotonic()
        self._level = first_s
        self._armed_from = self._heard  # the last word the armed timer counts from
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def start(self) -> None:
        """Arm the timer (in the running loop), counting from now."""
        self._loop = asyncio.get_running_loop()
        self._heard = time.monotonic()
        self._arm(self._heard, self.first_s)

    def heard(self) -> None:
        """A sign of life: costs a clock read, no timer operation."""
        self._heard = time.monotonic()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, since: float, level: float) -> None:
        assert self._loop is not None
        if self._closed:
            return
        self._armed_from, self._level = since, level
        delay = max(0.0, since + level - time.monotonic())
        self._timer = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heard = self._heard
        if heard != self._armed_from:  # something came meanwhile: a new quiet, from its start
            self._arm(heard, self.first_s)
            return
        quiet = time.monotonic() - heard
        if quiet < self._level:  # the loop's clock ran a hair ahead of ours
            self._arm(heard, self._level)
            return
        level = self._on_quiet(quiet)
        if level is not None and not self._closed:  # on_quiet may have closed the clock
            self._arm(heard, level)
