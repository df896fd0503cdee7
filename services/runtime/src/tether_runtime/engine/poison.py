"""Poison runs: a run whose worker keeps dying (killed, out of memory) or losing its lease is not
claimed forever. Every claim counts an attempt and a run whose lease ran out again waits a
growing backoff before it is claimable (store/runs.py `claim_batch`); the claim past the limit
ends the run here instead of executing it, fenced by the epoch that claim just took, as every
other ending is: its terminal event and its status commit together, Redis hears of it after."""

from __future__ import annotations

import logging

from tether_common.run_bus import EventBus

from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import RunRow
from tether_runtime.store import event_log, runs
from tether_runtime.store.db import Pool

log = logging.getLogger(__name__)

EXHAUSTED = "RUN_ATTEMPTS_EXHAUSTED"


def exhausted(run: RunRow, max_attempts: int) -> bool:
    """Whether this claim is past the limit: the run was claimed `max_attempts` times already
    without pausing or ending (this claim is attempt `run.attempts`)."""
    return run.attempts > max_attempts


def message(max_attempts: int) -> str:
    times = "once" if max_attempts == 1 else f"{max_attempts} times in a row"
    return (
        f"The run's worker stopped {times} before the run could pause or finish (it was killed, "
        "ran out of memory or lost its lease), so the run was not retried again. Starting it "
        "again will likely stop the same way; its last steps and the runtime's logs show where."
    )


async def give_up(pool: Pool, bus: EventBus, run: RunRow, max_attempts: int) -> bool:
    """Fail a claimed run whose attempts are spent, without executing it. Returns False if the
    claim was already lost to another worker (then nothing was written)."""
    error = ev.error(EXHAUSTED, message(max_attempts))
    try:
        async with pool.acquire() as conn, conn.transaction():
            encoded, _ = await event_log.append(conn, run.id, [error], epoch=run.lease_epoch)
            await runs.finish(conn, run.id, run.lease_epoch, "failed")
    except event_log.Fenced:
        return False
    await bus.publish(run.id, encoded)
    metrics.EVENTS_APPENDED.inc(len(encoded))
    metrics.RUNS_POISONED.inc()
    metrics.RUNS_FINISHED.labels(status="failed").inc()
    log.warning(
        "run failed: attempts exhausted",
        extra={"run_id": run.id, "attempts": run.attempts - 1, "code": EXHAUSTED},
    )
    return True
