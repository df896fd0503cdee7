"""Stopping a background task for good: cancel it and wait until it has ended.

On Python 3.11 a cancel can be lost: `asyncio.wait_for` returns normally when the cancel lands in
the loop iteration its call finishes in (CPython gh-86296, fixed in 3.12; `event_wait.py` keeps
Tether's own waits off it). Tether's code can avoid it, a library's cannot: redis-py 8 bounds each
write of a client that has a `socket_timeout` with it. The task then runs on as if never
cancelled, and whoever awaits it waits for good: a gateway whose revocation follower lost its
cancel while it loaded the list never finished shutting down (CI, `test_gw_redis_round_trips.py`'s
teardown; 7 of 30 starts and stops here lost the first cancel). So the cancel is repeated until
the task ends.

For tasks whose answer to a cancel is quick (closing a connection, leaving a loop): a task that
cleans up for longer than `again_after_s` when cancelled (an MCP session terminating its server)
would have that cleanup cut by the next cancel, and is stopped its own way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)

AGAIN_AFTER_S = 0.5  # how long a cancelled task may take to end before it is cancelled again


async def stop(task: asyncio.Future[Any] | None, *, again_after_s: float = AGAIN_AFTER_S) -> None:
    """Cancel `task` (None: nothing to stop) and wait until it has ended, cancelling it again
    each `again_after_s` while it runs on. An error it ended with is raised here, as awaiting
    it would; its cancel is not."""
    if task is None:
        return
    lost = 0
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=again_after_s)
        lost += not task.done()
    if lost:
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        log.warning("task %s ran on after a cancel; cancelled %d more time(s)", name, lost)
    with contextlib.suppress(asyncio.CancelledError):
        await task
