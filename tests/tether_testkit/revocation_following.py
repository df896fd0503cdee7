"""A revocation follower for a test's block: started, synced, then stopped for good."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tether_common import task_stop
from tether_common.event_wait import wait_set
from tether_common.revocation import Revocations


@contextlib.asynccontextmanager
async def following(revocations: Revocations, redis: Any) -> AsyncIterator[asyncio.Task[None]]:
    """`revocations` follows `redis` from a task of its own, its list loaded before the block;
    stopped through task_stop, since a cancel that lands as one of its writes finishes is lost
    on Python 3.11."""
    task = asyncio.create_task(revocations.follow(lambda: redis), name="revocation-follower")
    try:
        if not await wait_set(revocations.synced, 15):
            raise TimeoutError("the revocation follower did not load the list within 15 s")
        yield task
    finally:
        await task_stop.stop(task)
