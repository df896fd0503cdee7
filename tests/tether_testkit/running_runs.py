"""Runs written straight to the store for the runtime's store and stream tests: queued beside
any other (run_admission.start_parallel, with its run_started), and claimed as a worker would."""

from __future__ import annotations

from typing import Any

from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import RunRow
from tether_runtime.store import conversations, event_log, run_admission, runs


async def queued_run(
    conn: Any, conversation_id: str, *, user: str = "alice", text: str = "hi"
) -> tuple[str, RunRow | None]:
    """(run id, the run stored; None when the conversation is not `user`'s)."""
    run_id = new_id("run")
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conversation_id)])
    run = await run_admission.start_parallel(
        conn, run_id, conversation_id, user, new_id("msg"), text, "opspilot", {}, (kind, data), {}
    )
    return run_id, run


async def running_run(
    conn: Any, title: str = "t", *, conversation_id: str = "", owner: str = "A", claim: int = 1
) -> RunRow:
    """A run queued in a new conversation (or `conversation_id`) and claimed by `owner` (a claim
    of up to `claim` runs, as a worker's): its row as the claim left it."""
    if not conversation_id:
        conversation_id = (await conversations.create(conn, "alice", title)).id
    run_id, _ = await queued_run(conn, conversation_id)
    claimed = [run for run, _ in await runs.claim_batch(conn, owner, 30, claim)]
    (run,) = [r for r in claimed if r.id == run_id]
    return run
