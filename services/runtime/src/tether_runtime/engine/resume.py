"""ResumeRun, CancelRun and interrupt expiry: the paths by which a person's decision (or the
clock) moves a paused run. Resume follows invariant 5 step by step, in this order.

All three lock the run, then its interrupt (`interrupts.lock_with_run`), in one transaction run
by `db.retrying`: two decisions fired at once on two pods serialize on the run row instead of
deadlocking, and the loser reads what the winner did and answers with its canonical status
(409 INTERRUPT_ALREADY_RESOLVED, 410 INTERRUPT_EXPIRED; a cancel after an approval is recorded
on the run). Events are published only after the commit."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

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
from tether_common.input_parsers import idempotency_key, json_document
from tether_common.run_bus import EventBus
from tether_proto.wire import ToolCallStatus

from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import InterruptRow, RunRow
from tether_runtime.domain.views import RunView
from tether_runtime.engine import questions
from tether_runtime.policy import approvals
from tether_runtime.store import audit, db, event_log, idempotency, interrupts, runs
from tether_runtime.store.db import Conn, Pool, db_now

log = logging.getLogger(__name__)

MAX_VALUE_JSON = 256_000
"""Characters of ResumeRunRequest.value_json (a graph's resume value)."""


@dataclass(frozen=True)
class _Answer:
    """What a decision does to the interrupt's tool call: from which status to which, and
    whether it acts for the caller (and so needs the caller's grant)."""

    call_from: ToolCallStatus
    call_to: ToolCallStatus
    acts: bool


# The answers each kind of interrupt takes (DESIGN section 10); anything else is refused and
# changes nothing.
ANSWERS: dict[str, dict[str, _Answer]] = {
    "confirm_action": {
        "approved": _Answer(ToolCallStatus.PROPOSED, ToolCallStatus.APPROVED, acts=True),
        "rejected": _Answer(ToolCallStatus.PROPOSED, ToolCallStatus.REJECTED, acts=False),
    },
    # A write call whose outcome nobody could tell: call it again (same key), record it as done
    # (a person checked), or give it up. Retry and mark-done act on the resource: they need the
    # grant, as an approval does.
    "outcome_unknown": {
        "retry": _Answer(ToolCallStatus.UNKNOWN, ToolCallStatus.APPROVED, acts=True),
        "mark_done": _Answer(ToolCallStatus.UNKNOWN, ToolCallStatus.SUCCEEDED, acts=True),
        "abandon": _Answer(ToolCallStatus.UNKNOWN, ToolCallStatus.REJECTED, acts=False),
    },
}
# A question's answer (its content in `input`) becomes the call's result.
for _kind in ("select_option", "provide_input"):
    ANSWERS[_kind] = {
        "responded": _Answer(ToolCallStatus.PROPOSED, ToolCallStatus.SUCCEEDED, acts=False)
    }
# A question a tool asks during its call (an MCP server's elicitation, questions.ASKED_DURING):
# respond is MCP's accept (the content the form's), reject its decline, abandon its cancel.
_HELD_ANSWERS = {
    "responded": ANSWERS["provide_input"]["responded"],
    "rejected": _Answer(ToolCallStatus.PROPOSED, ToolCallStatus.REJECTED, acts=False),
    "abandon": _Answer(ToolCallStatus.PROPOSED, ToolCallStatus.REJECTED, acts=False),
}
# A graph's interrupt (its payload keeps the graph's `value`, driven.py) takes any of a
# confirmation's answers and a question's: approve and reject whatever its kind (the driver
# turns them into the value `interrupt()` returns, tether_langgraph._interrupts), and respond
# with an exact resume value (ResumeRunRequest.value_json).
_GRAPH_ANSWERS = {**ANSWERS["confirm_action"], **ANSWERS["provide_input"]}
DECISIONS = frozenset(d for answers in ANSWERS.values() for d in answers)
# Decisions that act on a resource (approve, retry, mark_done): a person's, never a service's.
APPROVALS = frozenset(d for answers in ANSWERS.values() for d, a in answers.items() if a.acts)


def is_graph_interrupt(intr: InterruptRow) -> bool:
    return "value" in intr.payload


def is_held(intr: InterruptRow) -> bool:
    """A question a tool asks during its call: its worker waits in the call (runs.hold)."""
    return questions.ASKED_DURING in intr.payload


def answers_for(intr: InterruptRow) -> dict[str, _Answer]:
    if is_held(intr):
        return _HELD_ANSWERS
    if is_graph_interrupt(intr) and intr.kind in ("confirm_action", *questions.KINDS):
        return _GRAPH_ANSWERS
    return ANSWERS.get(intr.kind, {})


def exact_value(value_json: str, user: str) -> dict[str, Any]:
    """A graph interrupt's answer given as the exact resume value: the call's result, whose
    `data.value` the driver hands back to `interrupt()` whole."""
    value = json_document(value_json, "value_json")
    data = {"value": value}
    return {
        "ok": True,
        "summary": f"{user} answered",
        "data": data,
        "facts": {},
        "outcome": "answered",
    }


def call_from(intr: InterruptRow) -> ToolCallStatus:
    """The status an interrupt's tool call waits in."""
    return ToolCallStatus.UNKNOWN if intr.kind == "outcome_unknown" else ToolCallStatus.PROPOSED


def request_hash(*parts: str) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


async def load_owned_run(conn: Conn, principal: Principal, run_id: str) -> RunRow:
    """Another user's run is indistinguishable from a missing one."""
    run = await runs.get(conn, run_id)
    _check_owned(principal, run, run_id)
    assert run is not None
    return run


def _check_owned(principal: Principal, run: RunRow | None, run_id: str) -> None:
    if run is None or run.user_id != principal.user_id:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")
    if principal.scope == "stream" and principal.run_id != run_id:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")


def _check_visible(principal: Principal, run_id: str) -> None:
    """Before the locks: only a stream token is refused outright (it reads one run)."""
    if principal.scope == "stream" and principal.run_id != run_id:
        raise NotFound("run not found", reason="RUN_NOT_FOUND")


async def _partial_approval(
    conn: Conn,
    run_id: str,
    intr: InterruptRow,
    principal: Principal,
    decision: str,
    key: str,
    given: int,
    scope: str,
    rhash: str,
    audit_ctx: audit.AuditContext | None,
) -> _Decided:
    """One approval of several recorded: the card stays pending, the run interrupted. The
    answer is stored under the caller's key like any other."""
    details = {"approvals": f"{given}/{intr.approvals_required}"}
    ctx = audit_ctx or audit.AuditContext()
    await audit.record_decision(
        conn,
        intr,
        actor=principal.user_id,
        decision=decision,
        outcome="approval_recorded",
        idempotency_key=key,
        ctx=audit.AuditContext(ctx.client_address, ctx.trace_id, {**ctx.details, **details}),
    )
    fresh = await runs.get(conn, run_id)
    assert fresh is not None
    view = RunView.of(fresh)
    if not await idempotency.store(conn, scope, key, rhash, {"run": view.to_json()}):
        raise IdempotencyKeyReused("this idempotency key was used for a different request")
    return _Decided("approval_recorded", view)


def _not_pending(intr: InterruptRow) -> Exception:
    if intr.status == "expired":
        return Expired("the interrupt expired")
    return AlreadyResolved(f"the interrupt was already {intr.status} ({intr.decision})")


@dataclass
class _Decided:
    """What a decision's transaction did: the answer (or the error to answer once the recorded
    expiry is committed), the events to publish after the commit, the outcome for the metric."""

    outcome: str
    view: RunView | None = None
    replayed: bool = False
    encoded: list[bytes] = field(default_factory=list)
    error: Exception | None = None


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
    *,
    audit_ctx: audit.AuditContext | None = None,
    value_json: str = "",
) -> tuple[RunView, bool]:
    """`value_json`: with decision respond, a graph interrupt's exact resume value (JSON text);
    it wins over `input_text`."""
    # 1. authenticate: done by the caller (principal); stream tokens may not act.
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    if decision not in DECISIONS:
        raise InvalidArgument(
            "decision must be approve, reject, respond, retry, mark_done or abandon"
        )
    if value_json:
        if decision != "responded":
            raise InvalidArgument("value_json goes with decision respond")
        if len(value_json) > MAX_VALUE_JSON:
            raise InvalidArgument(f"value_json is longer than {MAX_VALUE_JSON} characters")
        json_document(value_json, "value_json")  # refused before anything is read
        input_text = ""
    if decision in APPROVALS and not principal.may_approve():
        # Before the idempotency lookup: a service's approval is not stored, replayed or counted.
        raise PermissionDenied("a service cannot approve")
    idempotency_key(key, required=True)
    scope = f"resume:{principal.user_id}"
    rhash = request_hash(
        run_id, interrupt_id, decision, input_text, *([value_json] if value_json else [])
    )
    async with pool.acquire() as conn:
        # 2. the same key: the stored answer, or IDEMPOTENCY_KEY_REUSED; nothing changes.
        replay = await stored_answer(conn, scope, key, rhash)
        if replay is not None:
            metrics.RESUME_OUTCOMES.labels(outcome="replayed").inc()
            return replay, True
        run = await runs.get(conn, run_id)
        if run is None or run.user_id != principal.user_id:
            # A non-owner may decide a card whose approval policy names them: checked under
            # the locks below (step 3-4); anyone else is told the run does not exist.
            _check_visible(principal, run_id)
        else:
            _check_owned(principal, run, run_id)

    async def decide(conn: Conn) -> _Decided:
        # 3. the pending interrupt of this run, locked in the one order (run, then interrupt):
        # a cancel, an expiry or another decision either finished before this or waits for it.
        run, intr = await interrupts.lock_with_run(conn, run_id, interrupt_id)
        if run is None or not await approvals.may_see(conn, principal.user_id, run, intr):
            raise NotFound("run not found", reason="RUN_NOT_FOUND")
        if intr is None:
            raise NotFound("interrupt not found", reason="INTERRUPT_NOT_FOUND")
        if intr.status != "pending":
            # The loser of a race: a twin with this key is a replay; else the canonical status.
            replay = await stored_answer(conn, scope, key, rhash)
            if replay is not None:
                return _Decided("replayed", replay, replayed=True)
            return _Decided(intr.status, error=_not_pending(intr))
        answer = answers_for(intr).get(decision)
        if value_json and not is_graph_interrupt(intr):
            return _Decided(
                "invalid_answer",
                error=InvalidArgument(
                    "value_json answers a graph's interrupt; this one takes `input`",
                    reason="INVALID_ANSWER",
                ),
            )
        if answer is None:
            fits = ", ".join(sorted(answers_for(intr))) or "none"
            return _Decided(
                "invalid_answer",
                error=InvalidArgument(
                    f"a {intr.kind} interrupt takes {fits}, not {decision}",
                    reason="INVALID_ANSWER",
                ),
            )
        # An answer's content must fit its question (an option offered, a fill valid against
        # the schema): refused before anything changes.
        if decision == "responded" and not value_json and intr.kind not in questions.KINDS:
            return _Decided(
                "invalid_answer",
                error=InvalidArgument(
                    f"a {intr.kind} interrupt is answered with respond only with value_json",
                    reason="INVALID_ANSWER",
                ),
            )
        result = (
            exact_value(value_json, principal.user_id)
            if value_json
            else questions.answer(intr.kind, intr.payload, principal.user_id, input_text)
            if decision == "responded"
            else None
        )
        # 4. authorize with the caller's current grants (approving acts; rejecting never does).
        # An interrupt that names no action (a driven agent's confirmation that guards no
        # grant of its own; its write tools check theirs when they run) needs none.
        # A card with an approval policy: its approvers (and the requester, as it says).
        refused = await approvals.refusal(conn, principal.user_id, run, intr, answer.acts)
        if refused is not None:
            # A refused attempt is on the record too (it commits; nothing else changes).
            await audit.record_decision(
                conn,
                intr,
                actor=principal.user_id,
                decision=decision,
                outcome="denied",
                idempotency_key=key,
                ctx=audit_ctx,
            )
            return _Decided("permission_denied", error=refused)
        # 5. reject if expired, and record the expiry so the run can finish.
        # On Postgres's clock, as the sweeper and the claim decide it: a pod whose clock runs
        # ahead must not expire (and record as expired) a card that is still open.
        if intr.expires_at <= await db_now(conn):
            return _Decided(
                "expired", encoded=await _expire(conn, intr), error=Expired("the interrupt expired")
            )
        # 6a. a card that needs two approvers: each approval is its own claim (a row per
        # approver, under the run's lock); only the one that completes the count goes on.
        if answer.acts and approvals.governed(intr) and intr.approvals_required > 1:
            given = await approvals.add_approval(conn, intr, principal.user_id, key)
            if given < intr.approvals_required:
                return await _partial_approval(
                    conn, run_id, intr, principal, decision, key, given, scope, rhash, audit_ctx
                )
        # 6. the conditional claim, storing the key and the answer in the same transaction;
        # 7. on reject only status changes; 8. queue the continuation.
        claimed = await interrupts.resolve(
            conn,
            intr,
            status="resolved",
            decision=decision,
            user_id=principal.user_id,
            call_status=answer.call_to,
            call_from=answer.call_from,
            input_text=input_text or None,
            idempotency_key=key,
            require_unexpired=True,
        )
        if claimed is None:  # still pending under our lock: expired by the store's clock
            return _Decided(
                "expired", encoded=await _expire(conn, intr), error=Expired("the interrupt expired")
            )
        await audit.record_decision(
            conn,
            intr,
            actor=principal.user_id,
            decision=decision,
            outcome="resolved",
            idempotency_key=key,
            ctx=audit_ctx,
        )
        if result is not None:
            await interrupts.settle_call(conn, run_id, intr.call_id, result["summary"], result)
        if decision == "mark_done":
            summary = f"marked done by {principal.user_id}"
            await interrupts.settle_call(
                conn,
                run_id,
                intr.call_id,
                summary,
                {"ok": True, "summary": summary, "data": {}, "facts": {}, "outcome": "marked_done"},
            )
        encoded = await _requeue(
            conn,
            run_id,
            [ev.interrupt_resolved(intr.id, decision, principal.user_id)],
            trace_context,
            held=is_held(intr),
        )
        fresh = await runs.get(conn, run_id)
        assert fresh is not None
        view = RunView.of(fresh)
        if not await idempotency.store(conn, scope, key, rhash, {"run": view.to_json()}):
            # This caller's key is already stored for another request: nothing of this commits.
            raise IdempotencyKeyReused("this idempotency key was used for a different request")
        return _Decided(decision, view, encoded=encoded)

    done = await db.retrying(pool, decide)
    if done.encoded:
        await bus.publish(run_id, done.encoded)
    metrics.RESUME_OUTCOMES.labels(outcome=done.outcome).inc()
    if done.error is not None:
        raise done.error
    assert done.view is not None
    return done.view, done.replayed


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
    *,
    held: bool = False,
) -> list[bytes]:
    """Announce the decision and queue the continuation; only an interrupted run moves. The
    continuation carries the approval's trace context through the queue. `held`: the question
    of a tool in progress, whose worker waits for it: the run goes back to that worker's lease
    (or to the queue if that lease ran out)."""
    encoded, _ = await event_log.append(conn, run_id, events, statuses=["interrupted"])
    if held:
        await runs.unhold(conn, run_id, trace_context)
    else:
        await runs.requeue(conn, run_id, trace_context)
    return encoded


async def _expire(conn: Conn, intr: InterruptRow) -> list[bytes]:
    """Under the run's and the interrupt's locks: mark the pending interrupt expired and let the
    run finish by saying nothing was done. Returns the events to publish after the commit."""
    claimed = await interrupts.resolve(
        conn,
        intr,
        status="expired",
        decision="expired",
        user_id=None,
        call_status=ToolCallStatus.REJECTED,
        call_from=call_from(intr),
    )
    if claimed is None:
        return []
    await audit.record_decision(
        conn, intr, actor=audit.SYSTEM, decision="expired", outcome="expired"
    )
    return await _requeue(
        conn, intr.run_id, [ev.interrupt_resolved(intr.id, "expired")], held=is_held(intr)
    )


async def expire_interrupt(pool: Pool, bus: EventBus, intr: InterruptRow) -> bool:
    """Mark an overdue interrupt expired (once, whoever gets there first) and let the run finish
    by saying nothing was done."""

    async def expire(conn: Conn) -> list[bytes]:
        _, locked = await interrupts.lock_with_run(conn, intr.run_id, intr.id)
        if locked is None or locked.status != "pending":
            return []  # decided, cancelled or expired already
        return await _expire(conn, locked)

    try:
        encoded = await db.retrying(pool, expire)
    except event_log.Fenced:
        return False  # the run left `interrupted` without its interrupt: nothing was written
    if not encoded:
        return False
    await bus.publish(intr.run_id, encoded)
    return True


async def cancel_run(
    pool: Pool,
    bus: EventBus,
    principal: Principal,
    run_id: str,
    reason: str,
    *,
    audit_ctx: audit.AuditContext | None = None,
) -> RunView:
    """A queued or interrupted run is cancelled at once (its pending interrupt with it); a running
    one gets `cancel_requested` and its worker ends it at its next step (the answer's run is then
    still running: the gateway answers 202 for that, 200 for a run already cancelled)."""
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    reason = (reason or "cancelled by the user")[:500]

    async def cancel(conn: Conn) -> tuple[RunView, list[bytes]]:
        run, pending = await interrupts.lock_with_run(conn, run_id)
        _check_owned(principal, run, run_id)
        assert run is not None
        encoded: list[bytes] = []
        if run.status == "cancelled":
            pass  # cancelling twice is the same as once
        elif run.terminal:
            raise FailedPrecondition(
                f"the run is already {run.status}", reason="RUN_NOT_CANCELLABLE"
            )
        elif run.status == "running":
            await runs.request_cancel(conn, run_id, reason)
        else:
            events: list[ev.RunEvent] = []
            if pending is not None:
                await interrupts.resolve(
                    conn,
                    pending,
                    status="cancelled",
                    decision="cancelled",
                    user_id=principal.user_id,
                    call_status=ToolCallStatus.REJECTED,
                    call_from=call_from(pending),
                )
                await audit.record_decision(
                    conn,
                    pending,
                    actor=principal.user_id,
                    decision="cancelled",
                    outcome="cancelled",
                    ctx=audit_ctx,
                )
                events.append(ev.interrupt_resolved(pending.id, "cancelled", principal.user_id))
                if is_held(pending):
                    await runs.wake_held(conn, run_id)  # its call waits in a worker
            events.append(ev.cancelled(reason))
            encoded, _ = await event_log.append(
                conn, run_id, events, statuses=["waiting", "queued", "interrupted"]
            )
            await runs.mark_cancelled(conn, run_id, reason)
        fresh = await runs.get(conn, run_id)
        assert fresh is not None
        return RunView.of(fresh), encoded

    view, encoded = await db.retrying(pool, cancel)
    if encoded:
        await bus.publish(run_id, encoded)
    return view
