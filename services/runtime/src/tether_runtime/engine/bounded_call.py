"""A tool call bounded by its timeout whether or not the tool lets go when cancelled.

The call runs in a task of its own and the run waits on it through a shield: when the timeout
fires (or the run is cancelled: a lost lease, a shutdown), the call is cancelled and given
`CANCEL_GRACE_S` to unwind; one still running after that is left running, detached, and said so
in the log. Before, the call ran in the run's own task, and a tool stuck in its cleanup after
the cancel (an asyncpg pool of its own without a `command_timeout`, whose connection had gone
half-open: its release waits for the server to acknowledge the cancel, which never comes) held
its run past the timeout for good, its lease renewed by the worker's heartbeat all along
(tests/integration/chaos/test_chaos_links.py, half-open Postgres connections)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a cancelled call has to end before the run goes on without it.
CANCEL_GRACE_S = 5.0

# Calls left running after their grace: kept referenced until they end (a task nothing holds
# may be collected mid-flight), each end logged.
_detached: set[asyncio.Task[Any]] = set()


async def call_within(
    work: Coroutine[Any, Any, T], name: str, grace_s: float = CANCEL_GRACE_S
) -> T:
    """`await work`, inside the caller's `asyncio.timeout` (which may reschedule meanwhile), but
    never longer than that plus `grace_s`: the timeout, or the caller's own cancellation, is
    raised once the call has ended or its grace is over. The call runs in a task of its own,
    with the caller's context (its span, the run's log fields)."""
    task = asyncio.create_task(work)
    try:
        return await asyncio.shield(task)
    except BaseException:
        if not task.done():
            task.cancel()
            await _let_go(task, name, grace_s)
        raise


async def _let_go(task: asyncio.Task[Any], name: str, grace_s: float) -> None:
    done: set[asyncio.Task[Any]] = set()
    try:
        done, _ = await asyncio.wait({task}, timeout=grace_s)
    finally:  # also when cancelled again while waiting (a shutdown): stop waiting
        if done:
            if not task.cancelled():
                task.exception()  # retrieved: what it raised unwinding is the timeout's affair
        else:
            log.error(
                "tool %s did not end within %.1f s of being cancelled: left running, detached; "
                "the run goes on without it",
                name,
                grace_s,
            )
            _detached.add(task)
            task.add_done_callback(_ended)


def _ended(task: asyncio.Task[Any]) -> None:
    _detached.discard(task)
    err = None if task.cancelled() else task.exception()
    log.warning("tool call left running detached has ended%s", f": {err!r}" if err else "")


def detached() -> int:
    """How many calls are running detached."""
    return len(_detached)
