"""An interrupt's card: what a person is shown before deciding (a confirmation, an unknown
outcome, a question), each field masked and cut to its one limit, and the raising of the
interrupt that carries it: persisted with the checkpoint and the run's `interrupted` status in
one transaction, announced after, and the run pauses. Every kind of card, native or a driven
agent's, goes through here."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn

from tether_common.ids import new_id
from tether_common.redaction import redact, redact_value
from tether_sdk import Approval

from tether_runtime.domain import events as ev
from tether_runtime.engine.run_context import RunContext
from tether_runtime.engine.run_outcomes import Paused
from tether_runtime.store import interrupts, runs
from tether_runtime.store.db import Conn
from tether_runtime.streams.run_writer import Apply, Interrupted

FIELDS = ("title", "risk", "target", "tool", "parameter_summary", "reason", "details", "preview")
LIMITS = {
    # A card's fields.
    "title": 200,
    "risk": 200,
    "target": 300,
    "tool": 200,
    "parameter_summary": 500,
    "reason": 200,
    "details": 2000,
    "preview": 4000,
    # A question's option (value, label, description), each.
    "option": 500,
    # What events and the audit log say of a call: its summary, its progress, a reason.
    "summary": 500,
    "progress": 200,
    "audit_reason": 500,
}


def cut(limit: str, text: object) -> str:
    """`text` masked, then cut to the limit named (masked first: a cut could split a secret
    and leave a prefix the masking no longer recognizes)."""
    return redact(str(text or ""))[: LIMITS[limit]]


def card(**fields: object) -> dict[str, Any]:
    """A card of every field, each masked and cut; a field not given is empty."""
    return {f: cut(f, fields.get(f)) for f in FIELDS}


async def pause(
    ctx: RunContext,
    call_id: str,
    kind: str,
    payload: dict[str, Any],
    before: Apply,
    *,
    action: str = "",
    scope: str = "",
    approval: Approval | None = None,
    interrupt_id: str | None = None,
    tool_call: bool = True,
) -> NoReturn:
    """Raise the interrupt showing `payload` for the call: `before` (the call's row: proposed,
    or marked unknown), the interrupt, the checkpoint and the run's `interrupted` status in one
    transaction, then its `interrupt` event; the run pauses. Every field is masked once more,
    whatever raised the card (the model's `reason` included). `tool_call`: `call_id` is a tool
    call the run's events name (the event carries it), not a graph interrupt's own key."""
    await show(
        ctx,
        call_id,
        kind,
        payload,
        before,
        action=action,
        scope=scope,
        approval=approval,
        interrupt_id=interrupt_id,
        tool_call=tool_call,
    )
    raise Paused()


async def show(
    ctx: RunContext,
    call_id: str,
    kind: str,
    payload: dict[str, Any],
    before: Apply,
    *,
    action: str = "",
    scope: str = "",
    approval: Approval | None = None,
    interrupt_id: str | None = None,
    held_s: float | None = None,
    tool_call: bool = True,
) -> str:
    """`pause` without the pause; returns the interrupt's id. `held_s`: a question a tool asks
    during its call (held_questions.py), which expires after so many seconds (at most the
    interrupt TTL): the run is `interrupted` while its worker keeps the lease and waits
    (runs.hold); nothing else of the run is saved."""
    interrupt_id = interrupt_id or new_id("int")
    ttl = ctx.interrupt_ttl_s if held_s is None else min(held_s, ctx.interrupt_ttl_s)
    # Counted on Postgres's clock, which also decides when it has passed (the sweeper, the
    # claim): a pod whose clock runs ahead or behind mints the same expiry as any other.
    expires = await ctx.db_now() + timedelta(seconds=ttl)
    payload = redact_value(payload)
    save = ctx.save() if held_s is None else None
    run_id, epoch = ctx.run_id, ctx.epoch

    async def raise_card(conn: Conn) -> None:
        await before(conn)
        await interrupts.create_interrupt(
            conn,
            interrupt_id,
            run_id,
            call_id,
            kind,
            action,
            scope,
            payload,
            expires,
            approval,
        )

    async def hold(conn: Conn) -> None:
        await raise_card(conn)
        await runs.hold(conn, run_id, epoch)

    raised = ev.interrupt(interrupt_id, kind, payload, expires, call_id if tool_call else "")
    await ctx.commit([raised], hold if save is None else Interrupted(raise_card, save))
    return interrupt_id
