"""The tool-call state machine: one pending call of a run, from the model's request to its result.

    validate arguments -> gate -> read: grant (if it declares an action), claim, call
                                  (timeout, retries), finish
                               -> write: grant -> card (interrupt) -> approved -> re-authorize,
                                  recheck -> claim -> call -> finish
                                  after a crash inside the call: call again with the same key
                                  (idempotent_by_key), or reconcile, or ask a person
                                  (outcome_unknown: retry / mark done / abandon)

From the claim on, a write call is the at-most-once machine's (write_call.py), which graph write
tools share. A call's status lives in `tool_call` (proposed, approved, executing, unknown, succeeded, failed,
rejected); every move is a conditional update fenced by the run's lease epoch (invariant 4)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from typing import Any

from opentelemetry import trace
from tether_common.backoff import NO_JITTER, Backoff
from tether_common.ids import new_id
from tether_common.redaction import redact
from tether_proto.wire import ToolCallStatus
from tether_sdk import (
    Approval,
    InvalidArguments,
    Reconciled,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    TransientError,
)
from tether_sdk._agent import RESERVED_TOOL_NAMES
from tether_sdk._context import Ask

from tether_runtime import metrics, policy
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import ToolCallRow
from tether_runtime.engine import bounded_call, cards, held_questions, questions
from tether_runtime.engine.checkpoint import PendingCall
from tether_runtime.engine.run_context import ToolRun
from tether_runtime.engine.run_outcomes import Paused
from tether_runtime.engine.tool_results import failure, result_body
from tether_runtime.engine.write_call import Uncertain, Write, WriteCall
from tether_runtime.policy import approvals
from tether_runtime.store import audit, conversations, event_log, interrupts
from tether_runtime.store.db import Conn
from tether_runtime.store.event_log import CallFinish
from tether_runtime.streams.run_writer import Apply, ClaimRead, FinishRead, ReadGrant, ThenSave

log = logging.getLogger(__name__)
tracer = trace.get_tracer("tether.runtime.tool_calls")

QUESTIONS = RESERVED_TOOL_NAMES  # a question's pending call; no tool may take these names

# What the model is told when a write call did not run, by the decision that stopped it.
_NOT_RUN = {"expired": "expired", "abandon": "abandoned", "abandoned": "abandoned"}


class ToolCalls:
    def __init__(self, ex: ToolRun) -> None:
        self.x = ex
        self._asking = False
        """A call of this run waits for a person's answer to its question (held_questions.py)."""

    @property
    def _run_id(self) -> str:
        return self.x.run_id

    async def process(self, call: PendingCall) -> None:
        if call.tool in QUESTIONS:
            await self._ask(call)
            return
        agent = self.x.loaded.agent
        tool = agent.tool(call.tool)
        if call.invalid:
            metrics.TOOL_CALLS.labels(tool=call.tool, status="invalid").inc()
            why = f"the arguments for {call.tool} could not be read ({call.invalid})"
            await self._skip(call, failure(f"{why}; send them again as one JSON object", "invalid"))
            return
        declared = [t.name for t in agent.tools]
        gate, pool, user = self.x.gate, self.x.pool, self.x.run.user_id
        if not await gate.allows(pool, agent.name, declared, call.tool, user):
            # A tool the agent does not have (never had, or an MCP server no longer lists it)
            # is said as such; the gate still counts the call as a violation.
            why = "no such tool" if tool is None else "blocked by the tool policy"
            await self._skip(call, failure(f"{call.tool}: {why}", "blocked"))
            return
        if tool is None:
            await self._skip(call, failure(f"{call.tool}: no such tool", "blocked"))
            return
        try:
            args = tool.validate(call.args)
        except InvalidArguments as err:
            # Back to the model, which may correct itself; the arguments reach neither the tool
            # nor a person's card.
            metrics.TOOL_CALLS.labels(tool=tool.name, status="invalid").inc()
            body = failure(f"invalid arguments for {tool.name}: {err.message}", "invalid")
            await self._skip(call, body)
            return
        if tool.effect == "read":
            await self._read(call, tool, args)
        else:
            await self._write(call, tool, args)

    # -- questions to a person ---------------------------------------------------------------

    async def _ask(self, call: PendingCall) -> None:
        """A step's SelectOption or ProvideInput: a pending call of its own, answered by a
        person through the same resume order and conditional claim as a confirmation."""
        async with self.x.pool.acquire() as conn:
            row = await interrupts.get_call(conn, self._run_id, call.call_id)
        if row is None:
            problem = questions.problem(call.tool, call.args)
            if problem is not None:
                await self._skip(call, failure(problem, "invalid"))
                return
            payload = questions.payload(call.tool, call.args)
            key = f"{self._run_id}:{call.call_id}"

            async def propose(conn: Conn) -> None:
                await interrupts.propose_call(
                    conn, self._run_id, call.call_id, call.tool, call.args, key
                )

            await self._pause(call, call.tool, payload, propose)
        assert row is not None
        if row.status == ToolCallStatus.PROPOSED:
            raise Paused()
        if row.status == ToolCallStatus.SUCCEEDED and row.result is not None:
            await self._skip(call, row.result)
            return
        decision = await self._decision(call)
        outcome = "expired" if decision == "expired" else "rejected"
        await self._skip(call, failure(f"nobody answered: {decision}", outcome))

    async def _row(self, call: PendingCall) -> ToolCallRow | None:
        """The call's stored row; none for a call this executor's own step just made pending
        (run_loop.RunExecutor.fresh_calls), whose first look needs no round trip."""
        if call.call_id in self.x.fresh_calls:
            self.x.fresh_calls.discard(call.call_id)
            return None
        async with self.x.pool.acquire() as conn:
            return await interrupts.get_call(conn, self._run_id, call.call_id)

    async def _skip(self, call: PendingCall, body: dict[str, Any]) -> None:
        self.x.record(call, body)
        await self.x.commit([], self.x.save())

    # -- read tools ------------------------------------------------------------------------

    async def _read(self, call: PendingCall, tool: Tool, args: dict[str, Any]) -> None:
        row = await self._row(call)
        if (
            row is not None
            and row.status in (ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED)
            and row.result is not None
        ):
            await self._skip(call, row.result)
            return
        key = f"{self._run_id}:{call.call_id}"
        claim = ClaimRead(self._run_id, call.call_id, tool.name, args, key, self.x.epoch)
        started = (
            []
            if row is not None
            else [ev.tool_started(call.call_id, tool.name, self._summary(tool, args))]
        )
        try:
            await self.x.commit(started, replace(claim, grant=self._read_grant(tool, args)))
        except event_log.Denied:
            # Nothing of that commit was written. Recorded like any finished call (a replay
            # after a crash answers the same), and announced by its `tool_finished` alone: the
            # tool never started, nothing was read.
            await self._finish(call, tool, self._read_denial(tool, args), before=claim)
            return
        limits = self.x.loaded.agent.limits
        attempt = 0
        while True:
            attempt += 1
            try:
                result = await self._call(call, tool, args, key, None, attempt)
                body = result_body(result)
            except TransientError as err:
                if attempt <= limits.tool_retries:
                    await self._backoff(attempt)
                    continue
                body = failure(f"{tool.name} failed: {err.message}")
            except ToolError as err:
                body = failure(f"{tool.name} failed: {err.message}")
            except Uncertain as err:
                # A read changes nothing: calling it again is always safe.
                if attempt <= limits.tool_retries:
                    await self._backoff(attempt)
                    continue
                body = failure(str(err))
            await self._finish(call, tool, body)
            return

    def _read_grant(self, tool: Tool, args: dict[str, Any]) -> ReadGrant | None:
        """A read tool that declares an `action` needs the run's user to hold it on the call's
        scope, checked at every call (never cached) by the statement that claims it
        (ClaimRead); one without stays open to all."""
        if not tool.action:
            return None
        return ReadGrant(self.x.run.user_id, tool.action, tool.scope(args))

    def _read_denial(self, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
        metrics.TOOL_CALLS.labels(tool=tool.name, status="denied").inc()
        user = self.x.run.user_id
        return failure(f"{user} may not {tool.action} on {tool.scope(args)}", "denied")

    # -- write tools -----------------------------------------------------------------------

    async def _write(self, call: PendingCall, tool: Tool, args: dict[str, Any]) -> None:
        row = await self._row(call)
        scope = tool.scope(args)
        if row is None:
            await self._propose(call, tool, args, scope)  # pauses, unless no grant allows it
            return
        if row.status in (ToolCallStatus.PROPOSED, ToolCallStatus.UNKNOWN):
            raise Paused()  # still waiting for a person (not claimable; be safe)
        if row.status == ToolCallStatus.REJECTED:
            decision = await self._decision(call)
            outcome = _NOT_RUN.get(decision, "rejected")
            body = failure(f"not executed: {decision}", outcome)
            if row.claimed_epoch is not None:
                # It had started (its tool_started went out) before its outcome became unknown:
                # the person's answer ends the step for everyone following the run.
                body["summary"] = f"outcome unknown, not tried again ({decision})"
                await self._finish(call, tool, body, store=False)
                return
            await self._skip(call, body)
            return
        if row.status in (ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED):
            assert row.result is not None
            if row.result.get("outcome") == "marked_done":
                await self._finish(call, tool, row.result, store=False)
                return
            await self._skip(call, row.result)
            return
        if row.status == ToolCallStatus.APPROVED:
            await self._approved(call, tool, args, scope, row)
            return
        # `executing`: a worker died inside the call. Never repeat blindly; the client already
        # saw its `tool_started`.
        machine = self._machine(call, tool, args, scope)
        body = await machine.recover(row.idempotency_key, row.approved_by)
        await self._finish(call, tool, body, machine=machine)

    async def _propose(
        self, call: PendingCall, tool: Tool, args: dict[str, Any], scope: str
    ) -> None:
        user = self.x.run.user_id
        async with self.x.pool.acquire() as conn:
            allowed = await policy.granted(conn, user, tool.action, scope)
        if not allowed:
            await self._skip(call, failure(f"{user} may not {tool.action} on {scope}", "denied"))
            return
        key = f"{self._run_id}:{call.call_id}"
        ctx = self._context(call, tool, key, None, 1)
        card = await tool.confirmation_for(ctx, args)
        payload = cards.card(
            title=card.title,
            risk=card.risk,
            target=card.target,
            tool=tool.name,
            parameter_summary=card.summary,
            reason=args.get("reason", ""),
            details=card.details,
            preview=card.preview,
        )

        async def propose(conn: Conn) -> None:
            await interrupts.propose_call(conn, self._run_id, call.call_id, tool.name, args, key)

        await self._pause(
            call,
            "confirm_action",
            payload,
            propose,
            action=tool.action,
            scope=scope,
            approval=tool.approval_policy,
        )

    async def _approved(
        self,
        call: PendingCall,
        tool: Tool,
        args: dict[str, Any],
        scope: str,
        row: ToolCallRow,
    ) -> None:
        # Re-authorize with current grants and reload the resource: the world may have changed
        # while the run waited (invariant 5).
        approver = row.approved_by or self.x.run.user_id
        key = row.idempotency_key
        async with self.x.pool.acquire() as conn:
            still = await approvals.still_allowed(
                conn, self.x.run.user_id, approver, tool.action, scope, self._run_id, call.call_id
            )
        reason = None if still else f"permission to {tool.action} on {scope} was revoked"
        outcome = "denied"
        if reason is None:
            outcome = "skipped"
            try:
                reason = await tool.recheck_for(self._context(call, tool, key, approver, 1), args)
            except Exception as err:  # noqa: BLE001 - a recheck that fails must not let it act
                log.warning("recheck of %s failed: %s", tool.name, err)
                reason = f"could not recheck {tool.name} before acting"
        if reason is not None:
            body = failure(reason, outcome)
            self.x.record(call, body)
            save = self.x.save()

            async def skip(conn: Conn) -> None:
                await interrupts.skip_call(conn, self._run_id, call.call_id, reason, body)
                await audit.record_tool(
                    conn,
                    self._run_id,
                    call.call_id,
                    "tool.skipped",
                    outcome,
                    permission=tool.action,
                    scope=scope,
                    details={"reason": body["summary"]},
                )
                await save(conn)

            await self.x.commit([], skip)
            return
        machine = self._machine(call, tool, args, scope)
        await self.x.commit(
            [ev.tool_started(call.call_id, tool.name, self._summary(tool, args))],
            machine.claim(key, ToolCallStatus.APPROVED),
        )
        body = await machine.perform(key, approver)
        await self._finish(call, tool, body, machine=machine)

    def _machine(
        self, call: PendingCall, tool: Tool, args: dict[str, Any], scope: str
    ) -> WriteCall:
        """The at-most-once machine (write_call.py) for this write call of this tool."""

        async def invoke(key: str, approver: str | None, attempt: int) -> dict[str, Any]:
            return result_body(await self._call(call, tool, args, key, approver, attempt))

        async def reconcile(key: str, approver: str | None) -> Reconciled | None:
            return await self._reconcile(call, tool, args, key, approver)

        def interrupted(interrupt_id: str) -> None:
            call.interrupt_id = interrupt_id

        limits = self.x.loaded.agent.limits
        write = Write(
            call_id=call.call_id,
            tool=tool.name,
            args=args,
            action=tool.action,
            scope=scope,
            risk=tool.risk,
            summary=self._summary(tool, args),
            invoke=invoke,
            reconcile=reconcile if tool.can_reconcile else None,
            idempotent_by_key=tool.idempotent_by_key,
            retries=limits.tool_retries,
            backoff_s=limits.retry_backoff_s,
            on_interrupt=interrupted,
        )
        return WriteCall(self.x, write)

    async def _reconcile(
        self, call: PendingCall, tool: Tool, args: dict[str, Any], key: str, approver: str | None
    ) -> Reconciled | None:
        try:
            return await tool.reconcile_for(self._context(call, tool, key, approver, 1), args)
        except Exception as err:  # noqa: BLE001 - a failed reconcile knows nothing
            log.warning("reconcile of %s failed: %s", tool.name, err)
            return None

    async def _pause(
        self,
        call: PendingCall,
        kind: str,
        payload: dict[str, Any],
        before: Apply,
        *,
        action: str = "",
        scope: str = "",
        approval: Approval | None = None,
    ) -> None:
        """The call's card (cards.py); the call keeps the interrupt's id in the checkpoint."""
        call.interrupt_id = new_id("int")
        await cards.pause(
            self.x,
            call.call_id,
            kind,
            payload,
            before,
            action=action,
            scope=scope,
            approval=approval,
            interrupt_id=call.interrupt_id,
        )

    async def _decision(self, call: PendingCall) -> str:
        if not call.interrupt_id:
            return "rejected"
        async with self.x.pool.acquire() as conn:
            intr = await interrupts.get_interrupt(conn, call.interrupt_id)
        return (intr.decision if intr is not None else None) or "rejected"

    # -- calling a tool ----------------------------------------------------------------------

    def _summary(self, tool: Tool, args: dict[str, Any]) -> str:
        return cards.cut("summary", tool.summarize(args))

    def _timeout(self, tool: Tool) -> float:
        own = tool.timeout_s or self.x.loaded.agent.limits.tool_timeout_s
        return max(0.001, min(own, self.x.time_left()))

    def _context(
        self,
        call: PendingCall,
        tool: Tool,
        key: str,
        approver: str | None,
        attempt: int,
        ask: Ask | None = None,
    ) -> ToolContext:
        emit = self.x.emit

        async def progress(fraction: float, text: str) -> None:
            if self._asking:
                return  # the run is interrupted meanwhile: its log takes no write of this lease
            await emit([ev.tool_progress(call.call_id, tool.name, fraction, redact(text))])

        agent = self.x.loaded
        return ToolContext(
            run_id=self._run_id,
            conversation_id=self.x.run.conversation_id,
            requester=self.x.run.user_id,
            approver=approver,
            idempotency_key=key,
            deadline=time.time() + self._timeout(tool),
            logger=logging.LoggerAdapter(
                logging.getLogger(f"tether.agent.{agent.name}"),
                {"tool": tool.name, "call_id": call.call_id, "run_id": self._run_id},
            ),
            state=agent.state,
            attempt=attempt,
            _progress=progress,
            _ask=ask,
        )

    def _asker(self, call: PendingCall, tool: Tool, clock: list[asyncio.Timeout]) -> Ask:
        """A call's way to ask a person (held_questions.py). The person's time does not count
        against the call's timeout (`clock`: the call's, stopped while the question waits)."""

        async def ask(
            title: str, prompt: str, schema: dict[str, Any], wait_s: float
        ) -> tuple[str, dict[str, Any] | None]:
            loop = asyncio.get_running_loop()
            scope = clock[0] if clock else None
            when = scope.when() if scope is not None else None
            left = None if when is None else max(when - loop.time(), 0.0)
            if scope is not None:
                scope.reschedule(None)
            self._asking = True
            try:
                return await held_questions.ask(
                    self.x, call, tool.name, title, prompt, schema, wait_s
                )
            finally:
                self._asking = False
                if scope is not None and left is not None:
                    scope.reschedule(loop.time() + left)

        return ask

    async def _call(
        self,
        call: PendingCall,
        tool: Tool,
        args: dict[str, Any],
        key: str,
        approver: str | None,
        attempt: int,
    ) -> ToolResult:
        """One call of the tool within its timeout. ToolError (and TransientError) pass
        through; a timeout or anything unforeseen is Uncertain: it may have acted."""
        timeout = self._timeout(tool)
        clock: list[asyncio.Timeout] = []
        ctx = self._context(call, tool, key, approver, attempt, self._asker(call, tool, clock))
        try:
            with tracer.start_as_current_span(
                f"tool.{tool.name}",
                attributes={"tether.call_id": call.call_id, "tether.attempt": attempt},
            ):
                async with asyncio.timeout(timeout) as scope:
                    clock.append(scope)
                    return await bounded_call.call_within(tool.invoke(ctx, args), tool.name)
        except (ToolError, Uncertain):
            raise  # the tool said what happened (an MCP tool: a connection lost mid-call)
        except TimeoutError as err:
            metrics.TOOL_CALLS.labels(tool=tool.name, status="timeout").inc()
            raise Uncertain(f"{tool.name} timed out after {timeout:g} s") from err
        except Exception as err:  # a tool's failure is the model's to explain, not a crash
            log.warning("tool %s failed: %s", tool.name, err)
            raise Uncertain(f"{tool.name} failed") from err

    async def _backoff(self, attempt: int) -> None:
        policy = Backoff(self.x.loaded.agent.limits.retry_backoff_s, jitter=NO_JITTER)
        await policy.pause(attempt, left_s=self.x.time_left())

    async def _finish(
        self,
        call: PendingCall,
        tool: Tool,
        body: dict[str, Any],
        *,
        store: bool = True,
        before: Apply | None = None,
        machine: WriteCall | None = None,
    ) -> None:
        """The call's result to the model and its `tool_finished` to everyone; `store=False`
        when a person's answer already settled the call's row; `before` (the call's claim) in
        the same transaction; `machine`: a write call's, which stores its result."""
        if store and body["outcome"] != "denied":  # a denial was counted as one
            metrics.TOOL_CALLS.labels(tool=tool.name, status="ok" if body["ok"] else "error").inc()
        self.x.record(call, body)
        if body["ok"]:
            self.x.confirmed(body["facts"])
        save = self.x.save()
        run_id, epoch, conv_id = self._run_id, self.x.epoch, self.x.run.conversation_id
        finished = [ev.tool_finished(call.call_id, tool.name, body["ok"], body["summary"])]
        if store and machine is None and before is None:
            # No audit record, no claim to write first: it folds into the shared statement.
            facts = json.dumps(body["facts"]) if body["ok"] and body["facts"] else None
            # json.dumps as the pool's jsonb codec encodes the same body (store/db.py)
            result = CallFinish(call.call_id, body["ok"], body["summary"], json.dumps(body), facts)
            await self.x.commit(finished, FinishRead(run_id, epoch, conv_id, result, body, save))
            return

        async def apply(conn: Conn) -> None:
            if before is not None:
                await before(conn)
            if store and machine is not None:
                await machine.finish(body)(conn)
            elif store:
                await interrupts.finish_call(
                    conn, run_id, call.call_id, epoch, body["ok"], body["summary"], body
                )
            if body["ok"] and body["facts"]:
                await conversations.merge_facts(conn, conv_id, body["facts"])

        await self.x.commit(finished, ThenSave(apply, save))
