"""Waking the calls that wait for a person's answer (engine/held_wakes.py): a run's notification
wakes its waiters only, a lost LISTEN session wakes all, and the fallback is slow only while
LISTEN works."""

from __future__ import annotations

from tether_runtime.engine.held_wakes import POLL_S, HeldWakes


async def test_a_runs_notification_wakes_its_waiters_only() -> None:
    wakes = HeldWakes(5.0)
    with wakes.waiting("run_a") as a, wakes.waiting("run_b") as b:
        wakes.notified("run_a")
        wakes.notified("run_nobody")
        assert a.is_set() and not b.is_set()
        wakes.wake_all()
        assert b.is_set()
    wakes.notified("run_a")  # nobody waits any more: nothing to do, nothing kept
    assert wakes._waiting == {}


def test_the_fallback_is_slow_only_while_listening() -> None:
    wakes = HeldWakes(5.0)
    assert wakes.fallback_s == POLL_S
    wakes.listening = True
    assert wakes.fallback_s == 5.0
