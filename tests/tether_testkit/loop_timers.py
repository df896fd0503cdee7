"""Counting the timers an event loop arms: for tests that pin a path to no timer per message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest


def count_timers(
    monkeypatch: pytest.MonkeyPatch,
    armed_in: Callable[[asyncio.Task[Any] | None], bool] | None = None,
) -> list[float]:
    """Every timer the running loop (asyncio's: the tests' loop) arms from now on, by its due
    time: call_later and asyncio.timeout both arm theirs through call_at. `armed_in`: only
    those armed in a task it accepts (not an app's background tasks)."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        if armed_in is None or armed_in(asyncio.current_task()):
            armed.append(when)
        return call_at(when, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    return armed
