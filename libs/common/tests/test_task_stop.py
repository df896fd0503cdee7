"""task_stop.stop: a task that loses a cancel (Python 3.11's wait_for, under redis-py's writes)
is still stopped; an ordinary one is stopped by one cancel; its error is not hidden."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest
from tether_common.task_stop import stop


async def test_a_task_that_runs_on_after_a_cancel_is_cancelled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cancels = []

    async def swallows_the_first() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels.append(1)
                if len(cancels) > 1:
                    raise
                # what a lost cancel looks like: the task goes on as if none had come

    task = asyncio.create_task(swallows_the_first(), name="swallower")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        async with asyncio.timeout(5):
            await stop(task, again_after_s=0.05)
    assert task.cancelled() and len(cancels) == 2
    assert "swallower ran on after a cancel; cancelled 1 more time(s)" in caplog.text


async def test_python_3_11s_wait_for_loses_a_cancel_that_lands_as_its_call_finishes() -> None:
    """The mechanism, as redis-py's bounded writes meet it: the call inside a wait_for finishes
    and the task is cancelled in the same loop iteration. Python 3.11 returns the call's result
    and the cancel is gone (the task ends normally); 3.12 keeps it."""
    written: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(asyncio.wait_for(written, 1))
    await asyncio.sleep(0)  # the task now waits inside wait_for
    written.set_result(1)
    task.cancel()
    await asyncio.wait([task], timeout=1)
    if sys.version_info < (3, 12):
        assert not task.cancelled() and task.result() == 1  # the cancel was lost
    else:
        assert task.cancelled()


async def test_an_ordinary_task_is_stopped_by_one_cancel(caplog: pytest.LogCaptureFixture) -> None:
    task = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        await stop(task)
    assert task.cancelled() and not caplog.text


async def test_an_error_the_task_ended_with_is_raised_and_none_is_nothing() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="boom"):
        await stop(task)
    await stop(None)
