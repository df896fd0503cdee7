"""Runs and leases for the fencing tests, through the runtime's own store functions: a queued
run, a worker's claim (epoch + 1), and a takeover after the lease ran out."""

from __future__ import annotations

import asyncpg
from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, run_admission, runs


async def queued_run(conn: asyncpg.Connection) -> tuple[str, str]:
    """A queued run in a new conversation of alice's: (run id, conversation id)."""
    conv = await conversations.create(conn, "alice", "langgraph fencing")
    run_id = new_id("run")
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conv.id)])
    run = await run_admission.start_parallel(
        conn, run_id, conv.id, "alice", new_id("msg"), "hi", "graph", {}, (kind, data), {}
    )
    assert run is not None
    return run_id, conv.id


async def claim(conn: asyncpg.Connection, worker: str) -> int:
    """`worker` claims the (only) claimable run; returns its new lease epoch."""
    claimed = await runs.claim(conn, worker, 30.0)
    assert claimed is not None, f"{worker} claimed nothing"
    return claimed.lease_epoch


async def take_over(conn: asyncpg.Connection, run_id: str, worker: str) -> int:
    """The holder's lease runs out (its time moved back) and `worker` claims the run."""
    await conn.execute(
        "UPDATE run SET lease_expires_at = now() - interval '1 second', "
        "queued_at = now() - interval '1 second' WHERE id = $1",
        run_id,
    )
    return await claim(conn, worker)
