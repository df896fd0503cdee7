"""The at-most-once write call: one machine for every tool that acts on the world, a native
write tool (tool_calls.py) or a driven agent's graph write tool (driven.py).

    claim (conditional, fenced by the lease epoch) -> call with the idempotency key (retries
    while the tool says nothing happened) -> finish
    after a crash inside the call (the row left `executing`): reclaim, then call again with the
    same key (idempotent_by_key), or reconcile (ask what the key did), or ask a person
    (outcome_unknown: retry / mark done / abandon); the engine never guesses.

The machine returns a call's result; the caller announces it and gives it to its model or graph.
It raises Paused when a person must decide."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from tether_common.backoff import NO_JITTER, Backoff
from tether_common.ids import new_id
from tether_proto.wire import ToolCallStatus
from tether_sdk import Reconciled, ToolError, TransientError

from tether_runtime import metrics
from tether_runtime.engine import cards
from tether_runtime.engine.run_context import RunContext
from tether_runtime.engine.tool_results import failure, result_body
from tether_runtime.store import audit, event_log, interrupts
from tether_runtime.store.db import Conn
from tether_runtime.streams.run_writer import Apply

Invoke = Callable[[str, str | None, int], Awaitable[dict[str, Any]]]
"""One call of the tool: (idempotency key, approver, attempt) -> its result body. Raises
TransientError (nothing happened; may be tried again), ToolError (failed cleanly) or Uncertain
(it may have acted)."""
Reconcile = Callable[[str, str | None], Awaitable[Reconciled | None]]
"""Ask the tool what the key did: (key, approver) -> what it found; None: asking failed."""


class Uncertain(Exception):
    """The call may or may not have acted: it timed out or raised something unforeseen."""


@dataclass(frozen=True)
class Write:
    """One write call as the machine sees it, whichever kind of tool makes it."""

    call_id: str
    tool: str
    args: dict[str, Any]
    action: str
    scope: str
    risk: str
    summary: str
    """The arguments, summarized for a person (masked and cut: cards.cut)."""
    invoke: Invoke
    reconcile: Reconcile | None = None
    """None: the tool cannot tell afterwards whether a call happened."""
    idempotent_by_key: bool = False
    retries: int = 0
    backoff_s: float = 0.0
    audited: bool = True
    """Claims, results and unknown outcomes are recorded in the audit log (native tools)."""
    saves_on_claim: bool = False
    """The claim commits the run's checkpoint with it (a driven agent's announced calls)."""
    on_interrupt: Callable[[str], None] | None = None
    """Told the id of the interrupt a person answers, before the checkpoint is saved with it."""


def in_doubt(why: str, write: Write, found: Reconciled | None) -> str:
    """Why a person must decide: what went wrong, and what reconcile said (or that it can't)."""
    if write.reconcile is None:
        return f"{why}, and {write.tool} cannot tell whether it happened"
    if found is None:
        return f"{why}, and asking what it did failed"
    return f"{why}, and {found.reason}" if found.reason else why


class WriteCall:
    def __init__(self, ctx: RunContext, write: Write) -> None:
        self.ctx = ctx
        self.w = write

    def claim(self, key: str, from_status: ToolCallStatus | Literal["new"]) -> Apply:
        """The conditional claim of the call for this epoch (invariant 4), from `from_status`
        (new, approved, or executing by a dead epoch): another worker that claimed it first
        makes this one a zombie."""
        w, run_id, epoch = self.w, self.ctx.run_id, self.ctx.epoch
        save = self.ctx.save() if w.saves_on_claim else None

        async def claim(conn: Conn) -> None:
            if not await interrupts.claim_call(
                conn, run_id, w.call_id, w.tool, w.args, key, epoch, from_status
            ):
                raise event_log.Fenced(run_id)
            if w.audited:
                outcome = "reclaimed" if from_status == ToolCallStatus.EXECUTING else "claimed"
                await audit.record_tool(
                    conn, run_id, w.call_id, "tool.claimed", outcome, permission=w.action
                )
            if save is not None:
                await save(conn)

        return claim

    def finish(self, body: dict[str, Any]) -> Apply:
        """The call's result on its row (for the epoch that claimed it), and audited."""
        w, run_id, epoch = self.w, self.ctx.run_id, self.ctx.epoch

        async def finish(conn: Conn) -> None:
            await interrupts.finish_call(
                conn, run_id, w.call_id, epoch, body["ok"], body["summary"], body
            )
            if w.audited:
                await audit.record_tool(
                    conn,
                    run_id,
                    w.call_id,
                    "tool.executed",
                    body["outcome"],
                    permission=w.action,
                    details={"summary": body["summary"]},
                )

        return finish

    async def perform(self, key: str, approver: str | None) -> dict[str, Any]:
        """Call the claimed tool with its key until it says what happened: again while it says
        nothing did (TransientError), or while it may have acted but honours the key; when in
        doubt, reconcile; when still in doubt, a person decides (raises Paused)."""
        w = self.w
        attempt = 0
        while True:
            attempt += 1
            try:
                return await w.invoke(key, approver, attempt)
            except TransientError as err:
                # The tool says nothing happened: calling again with the same key is safe.
                if attempt <= w.retries:
                    await self._backoff(attempt)
                    continue
                return failure(f"{w.tool} failed: {err.message}")
            except ToolError as err:
                return failure(f"{w.tool} failed: {err.message}")
            except Uncertain as err:
                why = str(err)
            if w.idempotent_by_key and attempt <= w.retries:
                await self._backoff(attempt)
                continue
            found = None
            if w.reconcile is not None:
                found = await w.reconcile(key, approver)
                if found is not None and found.status == "done" and found.result is not None:
                    return result_body(found.result)
                if found is not None and found.status == "not_done":
                    if attempt <= w.retries:
                        await self._backoff(attempt)
                        continue
                    return failure(f"{why}; it did not happen")
            await self.outcome_unknown(in_doubt(why, w, found))

    async def recover(self, key: str, approver: str | None) -> dict[str, Any]:
        """A worker died inside the call (its row `executing`, its `tool_started` already out):
        reclaim it for this epoch, then never repeat it blindly."""
        w = self.w
        metrics.TOOL_RECOVERIES.labels(tool=w.tool).inc()
        await self.ctx.commit([], self.claim(key, ToolCallStatus.EXECUTING))
        if w.idempotent_by_key:
            return await self.perform(key, approver)
        why = f"the worker running {w.tool} stopped during the call"
        found = None
        if w.reconcile is not None:
            found = await w.reconcile(key, approver)
            if found is not None and found.status == "done" and found.result is not None:
                return result_body(found.result)
            if found is not None and found.status == "not_done":
                return await self.perform(key, approver)
        await self.outcome_unknown(in_doubt(why, w, found))

    async def outcome_unknown(self, why: str) -> NoReturn:
        """Nobody can tell whether the call acted: its row waits for a person (retry / mark
        done / abandon), shown by the same card whatever kind of tool made the call."""
        w, run_id, epoch = self.w, self.ctx.run_id, self.ctx.epoch
        metrics.OUTCOME_UNKNOWN.labels(tool=w.tool).inc()
        payload = cards.card(
            title=f"Did {w.tool} happen?",
            risk=w.risk,
            target=w.scope,
            tool=w.tool,
            parameter_summary=w.summary,
            reason=why,
            details=why,
        )

        async def mark(conn: Conn) -> None:
            if not await interrupts.mark_unknown(conn, run_id, w.call_id, epoch):
                raise event_log.Fenced(run_id)
            if w.audited:
                await audit.record_tool(
                    conn,
                    run_id,
                    w.call_id,
                    "tool.outcome_unknown",
                    "unknown",
                    permission=w.action,
                    scope=w.scope,
                    details={"reason": cards.cut("audit_reason", why)},
                )

        interrupt_id = new_id("int")
        if w.on_interrupt is not None:
            w.on_interrupt(interrupt_id)
        await cards.pause(
            self.ctx,
            w.call_id,
            "outcome_unknown",
            payload,
            mark,
            action=w.action,
            scope=w.scope,
            interrupt_id=interrupt_id,
        )

    async def _backoff(self, attempt: int) -> None:
        policy = Backoff(self.w.backoff_s, jitter=NO_JITTER)  # doubling from the agent's first
        await policy.pause(attempt, left_s=self.ctx.time_left())
