"""The deadlines of every SSE stream of a gateway process on one timer (issue #34): an idle
stream's next heartbeat, and a blocked write's stall limit.

A stream used to arm a timer of its own each time it waited for frames (its heartbeat) and an
`asyncio.timeout` around each write (a client that stopped reading), and cancel them when
frames came or the write returned: two timers created and cancelled per write, and one timer
handle (~0.5 KiB) held by every idle stream. Here a stream only records when its current
deadline falls (`at`, a float store); streams are filed in slots of `slot_s`, and one timer,
armed for the earliest slot, calls `expired()` on the streams of each slot whose deadline has
come. A stream whose deadline moved later since it was filed (it got frames, the write
returned) is filed again by its new deadline when its slot comes: a write costs no timer
operation at all, and a deadline moved earlier (rare: a write's limit, then a wait's shorter
one) re-files it at once.

A deadline is met between `slot_s` early and on time: a slot's timer fires at the slot's
start, when every deadline filed in it falls within the slot."""

from __future__ import annotations

import asyncio
import math
from typing import Protocol

SLOTS = 8  # slots per heartbeat interval: a heartbeat comes at most interval / SLOTS early
MIN_SLOT_S = 0.001


class Timed(Protocol):
    """A stream as the wheel sees it (sse.EventStream)."""

    deadline: float  # loop time its current deadline falls, set by `Deadlines.at`
    deadline_slot: int | None  # the slot it is filed in

    def expired(self) -> None:
        """Its deadline has come (a heartbeat is due, or its write stalled)."""


class Deadlines:
    """One timer for the deadlines of a process's streams."""

    def __init__(self, heartbeat_s: float) -> None:
        self.slot_s = max(heartbeat_s / SLOTS, MIN_SLOT_S)  # a zero interval: no division by it
        self._slots: dict[int, set[Timed]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed: int | None = None  # the slot the timer fires for
        self._firing = False

    def at(self, stream: Timed, deadline: float) -> None:
        """`stream`'s deadline is now `deadline` (loop time). Filed in a slot no later than it
        already, it stays there and is filed again when that slot comes."""
        stream.deadline = deadline
        slot = stream.deadline_slot
        if slot is None:
            self._file(stream)
        elif slot * self.slot_s > deadline:
            self._unfile(stream, slot)
            self._file(stream)

    def forget(self, stream: Timed) -> None:
        """`stream` ended: it leaves its slot (nothing holds an ended stream)."""
        slot = stream.deadline_slot
        if slot is not None:
            self._unfile(stream, slot)
            if self._armed is not None and self._armed not in self._slots:
                self._rearm()

    def filed(self) -> int:
        """Streams filed in a slot."""
        return sum(len(s) for s in self._slots.values())

    def timers(self) -> int:
        """Timers held: one while any stream is filed, else none."""
        return 0 if self._timer is None else 1

    def _file(self, stream: Timed) -> None:
        # The slot that starts at or before the deadline: its timer fires no later than it.
        slot = math.floor(stream.deadline / self.slot_s)
        stream.deadline_slot = slot
        streams = self._slots.get(slot)
        if streams is None:
            streams = self._slots[slot] = set()
            if not self._firing and (self._armed is None or slot < self._armed):
                self._arm(slot)
        streams.add(stream)

    def _unfile(self, stream: Timed, slot: int) -> None:
        stream.deadline_slot = None
        streams = self._slots.get(slot)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._slots[slot]

    def _arm(self, slot: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = slot
        self._timer = asyncio.get_running_loop().call_at(slot * self.slot_s, self._fire)

    def _rearm(self) -> None:
        if self._slots:
            self._arm(min(self._slots))
        else:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._armed = None

    def _fire(self) -> None:
        self._timer = self._armed = None
        now = asyncio.get_running_loop().time()
        # Due: within one slot of now (the timer fires at a slot's start, or a little late).
        horizon = now + self.slot_s
        self._firing = True
        try:
            for slot in sorted(s for s in self._slots if s * self.slot_s <= now):
                for stream in self._slots.pop(slot):
                    stream.deadline_slot = None
                    if stream.deadline <= horizon:
                        stream.expired()
                    else:
                        self._file(stream)  # its deadline moved: filed by the new one
        finally:
            self._firing = False
            self._rearm()
