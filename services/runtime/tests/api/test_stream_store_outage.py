"""A stream's read from Postgres waits out a store outage with short, capped pauses
(event_stream.READ_PAUSE_S): however long the outage, the stream reads again soon after the store
is back. The pool is a stand-in that refuses connections a number of times, then answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether_runtime.api import event_stream
from tether_runtime.api.event_stream import READ_PAUSE_S, EventStream


class RefusingPool:
    """`acquire()` fails like a stopped server (connection refused) `refusals` times."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.attempts = 0

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[str]:
        self.attempts += 1
        if self.attempts <= self.refusals:
            raise ConnectionRefusedError(111, "Connection refused")
        yield "conn"


async def test_a_read_retries_through_an_outage_with_capped_pauses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    real_sleep = asyncio.sleep
    me = asyncio.current_task()

    async def recorded(delay: float) -> None:
        # asyncio.sleep is patched for the whole process: only this test's read is recorded (and
        # hurried); other tasks on the session's loop (a shared runtime's loops) sleep as they
        # would. Counting theirs made this test fail once, with pauses of 30 s among the read's.
        if asyncio.current_task() is not me:
            await real_sleep(delay)
            return
        pauses.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(event_stream.asyncio, "sleep", recorded)
    pool = RefusingPool(refusals=20)  # a long outage: 20 failed reads in a row
    stream = EventStream(pool, bus=None, quiet_check_s=1.0)  # type: ignore[arg-type]

    async def query(conn: Any) -> str:
        return f"read on {conn}"

    assert await stream._read(query) == "read on conn"
    assert pool.attempts == 21
    assert len(pauses) == 20
    # Never a pause longer than the cap, however long the outage went on.
    assert max(pauses) <= READ_PAUSE_S
    assert all(p > 0 for p in pauses)
