"""A tool call is bounded by its timeout whether or not the tool lets go when cancelled
(tether_runtime.engine.bounded_call): the run goes on after the timeout and a grace, and a call
that would not end is left running, detached, and logged."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from tether_runtime.engine import bounded_call
from tether_runtime.engine.bounded_call import call_within


async def test_a_call_that_ends_gives_its_result_or_its_error() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def refuse() -> int:
        raise ValueError("no")

    async with asyncio.timeout(5):
        assert await call_within(answer(), "answer") == 42
        with pytest.raises(ValueError, match="no"):
            await call_within(refuse(), "refuse")
    assert bounded_call.detached() == 0


async def test_a_call_that_lets_go_ends_at_its_timeout_with_its_cleanup_run() -> None:
    cleaned = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.set()

    t = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await call_within(slow(), "slow", grace_s=5)
    assert time.monotonic() - t < 1.0  # not the grace: the call ended when cancelled
    assert cleaned.is_set()
    assert bounded_call.detached() == 0


async def test_a_call_that_will_not_end_is_left_running_after_its_grace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()
    ended = asyncio.Event()

    async def stubborn() -> None:
        # As a pool's release stuck waiting for a cancel's acknowledgement: the cancel lands,
        # and the cleanup it runs does not end.
        try:
            await asyncio.sleep(60)
        finally:
            await release.wait()
            ended.set()

    caplog.set_level(logging.WARNING, logger="tether_runtime.engine.bounded_call")
    t = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await call_within(stubborn(), "stubborn", grace_s=0.3)
    took = time.monotonic() - t
    assert 0.35 <= took < 1.5, took  # the timeout, then the grace: not the call's end
    assert bounded_call.detached() == 1
    assert "tool stubborn did not end within 0.3 s of being cancelled" in caplog.text
    release.set()
    await asyncio.wait_for(ended.wait(), 5)
    await asyncio.sleep(0)  # its done callback
    assert bounded_call.detached() == 0
    assert "tool call left running detached has ended" in caplog.text


async def test_a_cancelled_run_cancels_its_call() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def waits() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def run() -> None:
        async with asyncio.timeout(30):
            await call_within(waits(), "waits", grace_s=5)

    task = asyncio.create_task(run())
    await started.wait()
    task.cancel()  # a lost lease, a shutdown
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()
    assert bounded_call.detached() == 0


async def test_the_call_runs_with_the_callers_context() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="")
    var.set("the run's")

    async def read() -> str:
        return var.get()

    async with asyncio.timeout(5):
        assert await call_within(read(), "read") == "the run's"
