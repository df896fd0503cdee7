"""ResumeRun, CancelRun and interrupt expiry: the paths by which a person's decision (or the
clock) moves a paused run. Resume follows invariant 5 step by step, in this order."""

from __future__ import annotations

import hashlib
import json
import logging

from tether_common.auth import Principal
from tether_common.errors import (
    AlreadyResolved,
    Expired,
    FailedPrecondition,
    IdempotencyKeyReused,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)

from tether_runtime import events as ev
from tether_runtime import metrics
from tether_runtime.bus import EventBus
from tether_runtime.store import event_log, idempotency, interrupts, runs
from tether_runtime.store.db import Conn, Pool
from tether_runtime.store.records import InterruptRow, RunRow
from tether_runtime.views import RunView

log = logging.getLogger(__name__)

DECISIONS = {"approved": "approved", "rejected": "rejected", "responded": "responded"}
MAX_KEY = 200


def request_hash(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


async def load_owned_run(conn: Conn, principal: Principal, run_id: str) -> RunRow:
    """Another user's run is indistinguishable from a missing one."""
    run = await runs.get(conn, run_id)
    if run is None or run.user_id != principal.user_id:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")
    if principal.scope == "stream" and principal.run_id != run_id:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")
    return run


def _not_pending(intr: InterruptRow) -> Exception:
    if intr.status == "expired":
        return Expired("the interrupt expired")
    return AlreadyResolved(f"the interrupt was already {intr.status} ({intr.decision})")


async def resume_run(
    pool: Pool,
    bus: EventBus,
    principal: Principal,
    run_id: str,
    interrupt_id: str,
    decision: str,
    input_text: str,
    key: str,
    trace_context: dict[str, str] | None = None,
) -> tuple[RunView, bool]:
    # 1. authenticate: done by the caller (principal); stream tokens may not act.
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    if decision not in DECISIONS:
        raise InvalidArgument("decision must be approve, reject or respond")
    if not key or len(key) > MAX_KEY:
        raise InvalidArgument(f"idempotency_key is required (1-{MAX_KEY} characters)")
    scope = f"resume:{principal.user_id}"
    rhash = request_hash(run_id, interrupt_id, decision, input_text)
    async with pool.acquire() as conn:
        # 2. the same key: the stored answer, or IDEMPOTENCY_KEY_REUSED; nothing changes.
        replay = await stored_answer(conn, scope, key, rhash)
        if replay is not None:
            metrics.RESUME_OUTCOMES.labels(outcome="replayed").inc()
            return replay, True
        # 3. the pending interrupt of this run.
        run = await load_owned_run(conn, principal, run_id)
        intr = await interrupts.get_interrupt(conn, interrupt_id)
        if intr is None or intr.run_id != run.id:
            raise NotFound("interrupt not found", reason="INTERRUPT_NOT_FOUND")
        if intr.status != "pending":
            # A twin with this key may have won between step 2 and now: it is a replay then.
            replay = await stored_answer(conn, scope, key, rhash)
            if replay is not None:
                metrics.RESUME_OUTCOMES.labels(outcome="replayed").inc()
                return replay, True
            metrics.RESUME_OUTCOMES.labels(outcome=intr.status).inc()
            raise _not_pending(intr)
        # 4. authorize with the caller's current grants (approving acts; rejecting never does).
        if decision == "approved" and not await interrupts.has_grant(
            conn, principal.user_id, intr.action, intr.scope
        ):
            metrics.RESUME_OUTCOMES.labels(outcome="permission_denied").inc()
            raise PermissionDenied(f"you may not {intr.action} on {intr.scope}")
    # 5. reject if expired (and record the expiry so the run can finish).
    from datetime import UTC, datetime

    if intr.expires_at <= datetime.now(UTC):
        await expire_interrupt(pool, bus, intr)
        metrics.RESUME_OUTCOMES.labels(outcome="expired").inc()
        raise Expired("the interrupt expired")
    # 6. the conditional claim, storing the key and the answer in the same transaction;
    # 7. on reject only status changes; 8. queue the continuation.
    status_for_call = "approved" if decision == "approved" else "rejected"
    async with pool.acquire() as conn, conn.transaction():
        claimed = await interrupts.claim_interrupt(
            conn,
            intr.id,
            "resolved",
            decision,
            principal.user_id,
            input_text or None,
            key,
            require_unexpired=True,
        )
        if claimed is None:
            lost: Exception | None = None
        else:
            await interrupts.decide_call(
                conn, run.id, intr.call_id, status_for_call, principal.user_id
            )
            encoded = await _requeue(
                conn, run.id, [ev.interrupt_resolved(intr.id, decision)], trace_context
            )
            fresh = await runs.get(conn, run.id)
            assert fresh is not None
            view = RunView.of(fresh)
            if not await idempotency.store(conn, scope, key, rhash, {"run": view.to_json()}):
                raise AlreadyResolved("the interrupt was already resolved")
    if claimed is None:
        async with pool.acquire() as conn:
            replay = await stored_answer(conn, scope, key, rhash)
            if replay is not None:
                metrics.RESUME_OUTCOMES.labels(outcome="replayed").inc()
                return replay, True
            now = await interrupts.get_interrupt(conn, intr.id)
        assert now is not None
        lost = _not_pending(now) if now.status != "pending" else Expired("the interrupt expired")
        metrics.RESUME_OUTCOMES.labels(outcome="lost_race").inc()
        raise lost
    await bus.publish(run.id, encoded)
    metrics.RESUME_OUTCOMES.labels(outcome=decision).inc()
    return view, False


async def stored_answer(conn: Conn, scope: str, key: str, rhash: str) -> RunView | None:
    """AIP-155 for StartRun and ResumeRun alike: the first answer stored under this caller's key,
    or IDEMPOTENCY_KEY_REUSED when the key came with another request body."""
    stored = await idempotency.lookup(conn, scope, key)
    if stored is None:
        return None
    if stored.request_hash != rhash:
        metrics.RESUME_OUTCOMES.labels(outcome="key_reused").inc()
        raise IdempotencyKeyReused("this idempotency key was used for a different request")
    return RunView.from_json(stored.response["run"])


async def _requeue(
    conn: Conn,
    run_id: str,
    events: list[ev.RunEvent],
    trace_context: dict[str, str] | None = None,
) -> list[bytes]:
    """Announce the decision and queue the continuation; only an interrupted run moves. The
    continuation carries the approval's trace context through the queue."""
    encoded, _ = await event_log.append(conn, run_id, events, statuses=["interrupted"])
    await conn.execute(
        "UPDATE run SET status = 'queued', queued_at = now(), lease_owner = NULL, "
        "lease_expires_at = NULL, trace_context = coalesce($2, trace_context) WHERE id = $1",
        run_id,
        trace_context or None,
    )
    await runs.wake(conn)
    return encoded


async def expire_interrupt(pool: Pool, bus: EventBus, intr: InterruptRow) -> bool:
    """Mark an overdue interrupt expired (once, whoever gets there first) and let the run finish
    by saying nothing was done."""
    async with pool.acquire() as conn, conn.transaction():
        claimed = await interrupts.claim_interrupt(
            conn, intr.id, "expired", "expired", None, None, None, require_unexpired=False
        )
        if claimed is None:
            return False
        await interrupts.decide_call(conn, intr.run_id, intr.call_id, "rejected", None)
        try:
            encoded = await _requeue(conn, intr.run_id, [ev.interrupt_resolved(intr.id, "expired")])
        except event_log.Fenced:
            return False
    await bus.publish(intr.run_id, encoded)
    return True


async def cancel_run(
    pool: Pool, bus: EventBus, principal: Principal, run_id: str, reason: str
) -> RunView:
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    reason = (reason or "cancelled by the user")[:500]
    async with pool.acquire() as conn, conn.transaction():
        run = await load_owned_run(conn, principal, run_id)
        await conn.execute("SELECT 1 FROM run WHERE id = $1 FOR UPDATE", run_id)
        run = await load_owned_run(conn, principal, run_id)
        encoded: list[bytes] = []
        if run.status == "cancelled":
            pass  # cancelling twice is the same as once
        elif run.terminal:
            raise FailedPrecondition(
                f"the run is already {run.status}", reason="RUN_NOT_CANCELLABLE"
            )
        elif run.status == "running":
            # Its worker sees the flag at its next write or heartbeat and ends the run itself.
            await conn.execute(
                "UPDATE run SET cancel_requested = true, cancel_reason = $2 WHERE id = $1",
                run_id,
                reason,
            )
        else:
            events: list[ev.RunEvent] = []
            pending = await interrupts.pending_for_run(conn, run_id)
            if pending is not None:
                await interrupts.claim_interrupt(
                    conn,
                    pending.id,
                    "cancelled",
                    "cancelled",
                    principal.user_id,
                    None,
                    None,
                    require_unexpired=False,
                )
                await interrupts.decide_call(conn, run_id, pending.call_id, "rejected", None)
                events.append(ev.interrupt_resolved(pending.id, "cancelled"))
            events.append(ev.cancelled(reason))
            encoded, _ = await event_log.append(
                conn, run_id, events, statuses=["queued", "interrupted"]
            )
            await conn.execute(
                "UPDATE run SET status = 'cancelled', cancel_requested = true, cancel_reason = $2,"
                " lease_owner = NULL, lease_expires_at = NULL WHERE id = $1",
                run_id,
                reason,
            )
        fresh = await runs.get(conn, run_id)
        assert fresh is not None
    await bus.publish(run_id, encoded)
    return RunView.of(fresh)
