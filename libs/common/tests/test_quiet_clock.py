"""A QuietClock: one timer per reader, none per sign of life, and a quiet that lasts is told."""

from __future__ import annotations

import asyncio
import time

import pytest
from tether_common.quiet_clock import QuietClock
from tether_testkit.loop_timers import count_timers


async def test_signs_of_life_arm_no_timer_and_a_quiet_that_lasts_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    told: list[float] = []
    clock = QuietClock(0.2, lambda quiet_s: told.append(quiet_s) or None)
    armed = count_timers(monkeypatch)
    clock.start()
    # 0.3 s of words every 2 ms: the clock fires once after 0.2 s and re-arms from the last.
    started = time.monotonic()
    while time.monotonic() - started < 0.3:
        clock.heard()
        await asyncio.sleep(0)  # a turn of the loop, no timer
    assert told == []
    assert 2 <= len(armed) <= 3  # the start, then once per interval passed: not one per word
    await asyncio.sleep(0.3)
    assert len(told) == 1 and 0.2 <= told[0] < 0.3
    clock.close()


async def test_the_levels_go_on_from_the_same_last_word_until_none() -> None:
    told: list[float] = []

    def on_quiet(quiet_s: float) -> float | None:
        told.append(quiet_s)
        return None if len(told) == 3 else quiet_s + 0.05

    clock = QuietClock(0.05, on_quiet)
    clock.start()
    await asyncio.sleep(0.3)
    assert len(told) == 3
    assert [round(q, 2) for q in told] == pytest.approx([0.05, 0.1, 0.15], abs=0.03)


async def test_a_word_starts_again_from_the_first_level_and_close_stops_it() -> None:
    told: list[float] = []

    def on_quiet(quiet_s: float) -> float | None:
        told.append(quiet_s)
        return quiet_s + 0.05

    clock = QuietClock(0.05, on_quiet)
    clock.start()
    await asyncio.sleep(0.07)
    assert len(told) == 1
    clock.heard()  # the timer armed for 0.1 s finds it, and counts from it at the first level
    await asyncio.sleep(0.08)
    assert len(told) == 2 and 0.05 <= told[1] < 0.08
    clock.close()
    await asyncio.sleep(0.6)
    assert len(told) == 2


async def test_closing_it_from_on_quiet_arms_nothing_more() -> None:
    told: list[float] = []
    clock = QuietClock(0.02, lambda quiet_s: (told.append(quiet_s), clock.close(), 0.02)[2])
    clock.start()
    await asyncio.sleep(0.15)
    assert len(told) == 1
