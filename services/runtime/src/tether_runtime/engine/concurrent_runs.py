"""A second message while a run of the conversation is active: the agent's `concurrent_runs`
policy (issue 18). The store decides admission atomically (store/run_admission.py); this module
reads the policy, turns a refusal into RUN_ACTIVE, and carries out "interrupt".

- reject: RUN_ACTIVE (409) naming the newest active run; nothing is stored.
- enqueue: the run is stored `waiting` and queued when the conversation's active runs have ended
  (migration 0013's trigger, and the workers' sweep); it builds its context then, so it sees
  their answers.
- interrupt: stored as for enqueue, then the runs that were active are cancelled: queued,
  waiting or interrupted ones at once (a pending approval is cancelled with them), a running one
  at its next safe point (the worker checks between steps and tool calls, never inside a write
  tool); the last one's end queues the new run."""

from __future__ import annotations

import logging

from tether_common.auth import Principal
from tether_common.errors import FailedPrecondition, NotFound, RunActive
from tether_common.run_bus import EventBus

from tether_runtime.domain.records import RunRow
from tether_runtime.engine import resume
from tether_runtime.engine.loaded_agent import LoadedAgent
from tether_runtime.store import audit
from tether_runtime.store.db import Pool
from tether_runtime.store.run_admission import Admission

log = logging.getLogger(__name__)

DEFAULT_POLICY = "enqueue"


def policy_of(loaded: LoadedAgent) -> str:
    return str(getattr(loaded.agent, "concurrent_runs", DEFAULT_POLICY))


def admitted(admission: Admission) -> RunRow:
    """The stored run, or RUN_ACTIVE when the policy refused it."""
    if admission.run is None:
        newest = admission.active[-1]
        raise RunActive(
            f"run {newest} of this conversation is still active: wait for it to end, or "
            "cancel it, before sending another message",
            active_run_id=newest,
        )
    return admission.run


def interrupt_reason(new_run_id: str) -> str:
    return f"interrupted by a new message (run {new_run_id})"


async def interrupt_active(
    pool: Pool,
    bus: EventBus,
    principal: Principal,
    new_run_id: str,
    active: list[str],
    *,
    audit_ctx: audit.AuditContext | None = None,
) -> None:
    """Cancel the runs that were active when `new_run_id` was stored, oldest first. One that
    ended meanwhile is left as it is."""
    for run_id in active:
        try:
            await resume.cancel_run(
                pool, bus, principal, run_id, interrupt_reason(new_run_id), audit_ctx=audit_ctx
            )
        except (FailedPrecondition, NotFound) as err:
            log.info("run %s not interrupted: %s", run_id, err.message)
