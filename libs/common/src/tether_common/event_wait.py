"""Waiting for an asyncio.Event, at most so long.

Not `asyncio.wait_for(event.wait(), timeout)`: on Python 3.11 wait_for returns normally when it is
cancelled in the same turn of the loop as the event is set, so the cancel is lost and a loop
that waits this way may never stop (the webhook delivery loop's stop() once hung for good).
asyncio.timeout delivers the cancel, and needs no task of its own."""

from __future__ import annotations

import asyncio
import contextlib


async def wait_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until `event` is set or `timeout_s` passed: whether it is set."""
    if event.is_set():
        return True
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()
