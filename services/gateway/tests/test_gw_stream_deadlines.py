"""stream_deadlines.Deadlines: one timer for every stream's deadline; a deadline left alone
expires on time (at most a slot early), one moved later is not expired before its new time, one
moved earlier is met, an ended stream is let go, and no timer is held without a stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tether_gateway.stream_deadlines import SLOTS, Deadlines

HEARTBEAT = 0.2
SLOT = HEARTBEAT / SLOTS


class Stream:
    def __init__(self) -> None:
        self.deadline = 0.0
        self.deadline_slot: int | None = None
        self.expiries: list[float] = []

    def expired(self) -> None:
        self.expiries.append(asyncio.get_running_loop().time())


async def until(cond: Callable[[], bool]) -> None:
    for _ in range(300):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_streams_share_one_timer_and_expire_on_time() -> None:
    deadlines = Deadlines(HEARTBEAT)
    streams = [Stream() for _ in range(50)]
    due = now() + HEARTBEAT
    for stream in streams:
        deadlines.at(stream, due)
    assert deadlines.timers() == 1 and deadlines.filed() == 50
    await until(lambda: all(stream.expiries for stream in streams))
    for stream in streams:
        assert stream.expiries == [stream.expiries[0]]
        assert stream.expiries[0] >= due - SLOT - 0.001  # at most a slot early
    assert deadlines.timers() == 0 and deadlines.filed() == 0


async def test_a_deadline_moved_later_is_not_expired_before_it() -> None:
    deadlines = Deadlines(HEARTBEAT)
    moved, kept = Stream(), Stream()
    deadlines.at(moved, now() + HEARTBEAT)
    deadlines.at(kept, now() + HEARTBEAT)
    await asyncio.sleep(HEARTBEAT / 2)
    later = now() + HEARTBEAT
    deadlines.at(moved, later)  # frames came: it waits again
    assert deadlines.timers() == 1
    await until(lambda: bool(kept.expiries and moved.expiries))
    assert len(kept.expiries) == 1 and len(moved.expiries) == 1
    assert moved.expiries[0] >= later - SLOT - 0.001


async def test_a_deadline_moved_earlier_is_met() -> None:
    deadlines = Deadlines(HEARTBEAT)
    stream = Stream()
    deadlines.at(stream, now() + 10 * HEARTBEAT)  # a write's stall limit
    sooner = now() + HEARTBEAT
    deadlines.at(stream, sooner)  # the write returned: it waits for its heartbeat
    await until(lambda: bool(stream.expiries))
    assert sooner - SLOT - 0.001 <= stream.expiries[0]
    assert deadlines.filed() == 0 and deadlines.timers() == 0


async def test_an_ended_stream_is_let_go_with_its_timer() -> None:
    deadlines = Deadlines(HEARTBEAT)
    first, later = Stream(), Stream()
    deadlines.at(first, now() + HEARTBEAT)
    await asyncio.sleep(HEARTBEAT / 2)
    deadlines.at(later, now() + HEARTBEAT)
    deadlines.forget(first)
    assert deadlines.filed() == 1 and deadlines.timers() == 1 and first.deadline_slot is None
    deadlines.forget(later)
    assert deadlines.filed() == 0 and deadlines.timers() == 0
    await asyncio.sleep(HEARTBEAT * 1.2)
    assert first.expiries == [] and later.expiries == []


async def test_a_zero_interval_still_expires_deadlines() -> None:
    deadlines = Deadlines(0.0)
    stream = Stream()
    deadlines.at(stream, now())
    await until(lambda: bool(stream.expiries))
