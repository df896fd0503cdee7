"""Executes one claimed run from its checkpoint until it pauses, ends, or loses its lease.

Every write goes through `commit`: the events, the state they announce and the fence check share
one transaction; Redis hears of them only after commit."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry import trace
from tether_common.config import Settings
from tether_common.ids import new_id

from tether_runtime import events as ev
from tether_runtime import metrics, policy
from tether_runtime.agent import context
from tether_runtime.agent.gate import ToolGate
from tether_runtime.agent.model import Model, ModelInput, ToolCallRequest
from tether_runtime.agent.opspilot import AGENTS, REGISTRY, AgentSpec
from tether_runtime.agent.tools import Tool, ToolContext, ToolResult
from tether_runtime.bus import EventBus
from tether_runtime.event_sink import EventSink
from tether_runtime.run_writer import RunWriter
from tether_runtime.store import conversations, event_log, interrupts, runs
from tether_runtime.store.db import Conn, Pool
from tether_runtime.store.records import RunRow

log = logging.getLogger(__name__)
tracer = trace.get_tracer("tether.runtime.executor")

Apply = Callable[[Conn], Awaitable[None]]


@dataclass
class Engine:
    """What an executing run needs from its process."""

    pool: Pool
    bus: EventBus
    settings: Settings
    gate: ToolGate
    model: Model
    sink: EventSink = field(init=False)

    def __post_init__(self) -> None:
        self.sink = EventSink(self.pool, self.bus)


class Paused(Exception):
    """The run is waiting for a person; the worker lets it go."""


class Finished(Exception):
    """The run reached a terminal state."""


def started_checkpoint(message_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The state a run's first step starts from: its context and the id its answer streams
    under. StartRun stores it with the run, so a worker (or one that takes over after a crash)
    starts from the same state without a write of its own."""
    return {
        "v": 1,
        "started": True,
        "message_id": message_id,
        "messages": messages,
        "pending": [],
        "text": "",
    }


class RunExecutor:
    def __init__(self, engine: Engine, run: RunRow) -> None:
        self.e = engine
        self.run = run
        self.epoch = run.lease_epoch
        self.cp: dict[str, Any] = dict(run.checkpoint)
        self.cancel_requested = run.cancel_requested
        self.resume_skip = run.step_streamed
        self.agent: AgentSpec = AGENTS.get(run.agent, AGENTS["opspilot"])
        self.ctx = ToolContext(engine.pool, run.id, run.user_id)
        self.writer = RunWriter(
            engine.pool, engine.bus, engine.sink, run.id, run.lease_epoch, run.last_sequence
        )

    # -- the one write path --------------------------------------------------------------

    async def commit(
        self, events: list[ev.RunEvent], apply: Apply | None = None, *, streamed: int = 0
    ) -> None:
        """Events and the state they announce, durable on return (after all queued before)."""
        await self.writer.commit(events, apply, streamed=streamed)
        self.cancel_requested = self.cancel_requested or self.writer.cancel_requested

    def _save(self, *, reset_streamed: bool = False) -> Apply:
        cp = json.dumps(self.cp)  # the snapshot as of now, encoded once

        async def apply(conn: Conn) -> None:
            await runs.save_checkpoint(
                conn, self.run.id, self.epoch, cp, reset_streamed=reset_streamed
            )

        return apply

    # -- the loop ------------------------------------------------------------------------

    async def execute(self) -> str:
        """Returns the status the run left this worker in."""
        try:
            if not self.cp.get("started"):
                await self._start()
            while True:
                if self.cancel_requested:
                    await self._end_cancelled()
                if self.cp.get("pending"):
                    await self._process_pending()
                else:
                    await self._model_step()
        except Paused:
            return "interrupted"
        except Finished as fin:
            return str(fin)

    async def _start(self) -> None:
        """Only for a run queued by an older runtime, whose StartRun stored no started state:
        build it and persist it before streaming under its message id."""
        async with self.e.pool.acquire() as conn:
            messages = await context.initial_messages(
                conn, self.run.conversation_id, self.run.user_message_id
            )
        self.cp = started_checkpoint(new_id("msg"), messages)
        await self.commit([], self._save())

    async def _end(
        self,
        status: str,
        events: list[ev.RunEvent],
        extra: Apply | None = None,
        *,
        save: bool = False,
    ) -> None:
        """`save`: the final checkpoint is written by the same statement that ends the run."""
        cp = json.dumps(self.cp) if save else None

        async def apply(conn: Conn) -> None:
            if extra is not None:
                await extra(conn)
            await runs.finish(conn, self.run.id, self.epoch, status, cp)

        await self.commit(events, apply)
        metrics.RUNS_FINISHED.labels(status=status).inc()
        raise Finished(status)

    async def _end_cancelled(self) -> None:
        async with self.e.pool.acquire() as conn:
            reason = await conn.fetchval("SELECT cancel_reason FROM run WHERE id = $1", self.run.id)
        await self._end("cancelled", [ev.cancelled(reason or "cancelled by the user")])

    async def fail(self, code: str, message: str) -> None:
        """Called by the worker when execution raised: the run fails with a message for a person."""
        try:
            await self._end("failed", [ev.error(code, message)])
        except Finished:
            pass

    # -- model steps -----------------------------------------------------------------------

    async def _model_step(self) -> None:
        with tracer.start_as_current_span("model.step"):
            await self._model_step_inner()

    async def _model_step_inner(self) -> None:
        async with self.e.pool.acquire() as conn:
            conv = await conversations.get(conn, self.run.conversation_id)
        assert conv is not None
        request = ModelInput(
            context.system_text(conv), self.cp["messages"], self.agent.tools(), conv.facts
        )
        # Text of this step that an earlier, crashed attempt already streamed (first step only).
        skip, self.resume_skip = self.resume_skip, 0
        msg_id = self.cp["message_id"]
        step_text = ""
        sent = 0
        calls: list[ToolCallRequest] = []
        last_flush = time.monotonic()

        async def flush() -> None:
            nonlocal sent, last_flush
            start = max(sent, skip)
            if len(step_text) > start:
                piece = step_text[start:]
                await self.writer.emit([ev.text_delta(msg_id, piece)], streamed=len(piece))
                if self.writer.cancel_requested:
                    self.cancel_requested = True
                    await self._end_cancelled()
            sent = max(sent, len(step_text))
            last_flush = time.monotonic()

        async for chunk in self.e.model.stream(request):
            if isinstance(chunk, ToolCallRequest):
                calls.append(chunk)
                continue
            step_text += chunk
            if time.monotonic() - last_flush >= self.e.settings.coalesce_s:
                await flush()
        await flush()
        self.cp["text"] += step_text
        if calls:
            self.cp["messages"].append(
                {
                    "role": "assistant",
                    "content": step_text,
                    "tool_calls": [
                        {"id": c.call_id, "name": c.name, "args": c.args} for c in calls
                    ],
                }
            )
            self.cp["pending"] = [
                {"call_id": c.call_id, "tool": c.name, "args": c.args} for c in calls
            ]
            await self.commit([], self._save(reset_streamed=True))
            return
        text = self.cp["text"]
        conv_id = self.run.conversation_id

        async def store_answer(conn: Conn) -> None:
            await conversations.add_message(
                conn, conv_id, "assistant", text, run_id=self.run.id, message_id=msg_id
            )
            await context.update_summary(conn, conv_id)

        await self._end("completed", [ev.done(msg_id)], store_answer, save=True)

    # -- tool calls ------------------------------------------------------------------------

    def _record(self, call: dict[str, Any], result: ToolResult, outcome: str = "") -> None:
        """Give the model the call's result and drop it from the pending list."""
        body = {**result.as_json(), "outcome": outcome or ("ok" if result.ok else "error")}
        self.cp["messages"].append(
            {
                "role": "tool",
                "tool_call_id": call["call_id"],
                "name": call["tool"],
                "content": json.dumps(body),
            }
        )
        self.cp["pending"] = self.cp["pending"][1:]

    async def _process_pending(self) -> None:
        call = self.cp["pending"][0]
        tool = REGISTRY.get(call["tool"])
        allowed = self.e.gate.allows(
            self.agent.name, self.agent.allowlist, call["tool"], self.run.user_id
        )
        if tool is None or not allowed:
            why = "unknown tool" if tool is None else "blocked by the tool policy"
            self._record(call, ToolResult(False, f"{call['tool']}: {why}", {}), "blocked")
            await self.commit([], self._save())
            return
        if tool.mutating:
            await self._mutating(call, tool)
        else:
            await self._read_only(call, tool)

    async def _read_only(self, call: dict[str, Any], tool: Tool) -> None:
        async with self.e.pool.acquire() as conn:
            row = await interrupts.get_call(conn, self.run.id, call["call_id"])
        if row is not None and row.status in ("succeeded", "failed") and row.result is not None:
            self._record(call, ToolResult.from_json(row.result))
            await self.commit([], self._save())
            return
        key = f"{self.run.id}:{call['call_id']}"
        started = (
            []
            if row is not None
            else [ev.tool_started(call["call_id"], tool.name, tool.summarize(call["args"]))]
        )

        async def claim(conn: Conn) -> None:
            await interrupts.claim_call(
                conn, self.run.id, call["call_id"], tool.name, call["args"], key, self.epoch, "new"
            )

        await self.commit(started, claim)
        await self._execute(call, tool, key, reconcile=False)

    async def _execute(
        self, call: dict[str, Any], tool: Tool, key: str, *, reconcile: bool
    ) -> None:
        result: ToolResult | None = None
        if reconcile:
            result = await tool.reconcile(self.ctx, call["args"], key)
        if result is None:
            try:
                with tracer.start_as_current_span(
                    f"tool.{tool.name}", attributes={"tether.call_id": call["call_id"]}
                ):
                    result = await tool.run(self.ctx, call["args"], key)
            except Exception as err:  # a tool's failure is the model's to explain, not a crash
                log.warning("tool %s failed: %s", tool.name, err)
                result = ToolResult(False, f"{tool.name} failed", {})
        result = result.masked()
        metrics.TOOL_CALLS.labels(tool=tool.name, status="ok" if result.ok else "error").inc()
        self._record(call, result)
        save = self._save()
        conv_id = self.run.conversation_id

        async def apply(conn: Conn) -> None:
            await interrupts.finish_call(
                conn,
                self.run.id,
                call["call_id"],
                self.epoch,
                result.ok,
                result.summary,
                result.as_json(),
            )
            if result.ok and result.facts:
                await conversations.merge_facts(conn, conv_id, result.facts)
            await save(conn)

        await self.commit(
            [ev.tool_finished(call["call_id"], tool.name, result.ok, result.summary)], apply
        )

    async def _mutating(self, call: dict[str, Any], tool: Tool) -> None:
        async with self.e.pool.acquire() as conn:
            row = await interrupts.get_call(conn, self.run.id, call["call_id"])
            intr = (
                await interrupts.get_interrupt(conn, call["interrupt_id"])
                if call.get("interrupt_id")
                else None
            )
        scope = tool.scope(call["args"])
        if row is None:
            async with self.e.pool.acquire() as conn:
                granted = await policy.granted(conn, self.run.user_id, tool.action, scope)
            if not granted:
                self._record(
                    call,
                    ToolResult(False, f"{self.run.user_id} may not {tool.action}", {}),
                    "denied",
                )
                await self.commit([], self._save())
                return
            await self._raise_interrupt(call, tool, scope)
        status = row.status if row is not None else "proposed"
        if status == "proposed":
            raise Paused()  # still waiting (should not be claimable; be safe)
        if status == "rejected":
            decision = intr.decision if intr is not None else "rejected"
            outcome = {"expired": "expired", "cancelled": "rejected"}.get(
                decision or "", "rejected"
            )
            self._record(call, ToolResult(False, f"not executed: {decision}", {}), outcome)
            await self.commit([], self._save())
            return
        if status in ("succeeded", "failed"):
            assert row is not None and row.result is not None
            self._record(call, ToolResult.from_json(row.result))
            await self.commit([], self._save())
            return
        assert row is not None
        key = row.idempotency_key
        if status == "approved":
            await self._approved(call, tool, scope, row.approved_by or self.run.user_id, key)
            return

        # `executing`: a worker died mid-call. Reconcile with the external system, never repeat
        # blindly; the client already saw its `tool_started`.
        await self.commit([], self._claim(call, tool, key, "executing"))
        await self._execute(call, tool, key, reconcile=True)

    async def _approved(
        self, call: dict[str, Any], tool: Tool, scope: str, approver: str, key: str
    ) -> None:
        # Re-authorize with current grants and reload the resource: the world may have changed
        # while the run waited (invariant 5).
        async with self.e.pool.acquire() as conn:
            still = all(
                [
                    await policy.granted(conn, u, tool.action, scope)
                    for u in {approver, self.run.user_id}
                ]
            )
        reason = None if still else f"permission to {tool.action} was revoked"
        outcome = "denied"
        if reason is None:
            reason = await tool.recheck(self.ctx, call["args"])
            outcome = "skipped"
        if reason is not None:
            result = ToolResult(False, reason, {})
            self._record(call, result, outcome)
            save = self._save()

            async def skip(conn: Conn) -> None:
                await interrupts.skip_call(
                    conn, self.run.id, call["call_id"], reason, result.as_json()
                )
                await save(conn)

            await self.commit([], skip)
            return

        await self.commit(
            [ev.tool_started(call["call_id"], tool.name, tool.summarize(call["args"]))],
            self._claim(call, tool, key, "approved"),
        )
        await self._execute(call, tool, key, reconcile=False)

    def _claim(self, call: dict[str, Any], tool: Tool, key: str, from_status: str) -> Apply:
        """The conditional claim of a mutating call for this epoch (invariant 4): another worker
        that claimed it first makes this one a zombie."""

        async def claim(conn: Conn) -> None:
            if not await interrupts.claim_call(
                conn,
                self.run.id,
                call["call_id"],
                tool.name,
                call["args"],
                key,
                self.epoch,
                from_status,
            ):
                raise event_log.Fenced(self.run.id)

        return claim

    async def _raise_interrupt(self, call: dict[str, Any], tool: Tool, scope: str) -> None:
        interrupt_id = new_id("int")
        expires = datetime.now(UTC) + timedelta(seconds=self.e.settings.interrupt_ttl_s)
        payload = {
            "risk": tool.risk,
            "target": tool.target(call["args"]),
            "tool": tool.name,
            "parameter_summary": tool.summarize(call["args"]),
            "reason": str(call["args"].get("reason", ""))[:200],
        }
        call["interrupt_id"] = interrupt_id
        save = self._save()
        key = f"{self.run.id}:{call['call_id']}"

        async def apply(conn: Conn) -> None:
            await interrupts.propose_call(
                conn, self.run.id, call["call_id"], tool.name, call["args"], key
            )
            await interrupts.create_interrupt(
                conn,
                interrupt_id,
                self.run.id,
                call["call_id"],
                "confirm_action",
                tool.action,
                scope,
                payload,
                expires,
            )
            await save(conn)
            await runs.finish(conn, self.run.id, self.epoch, "interrupted")

        await self.commit([ev.interrupt(interrupt_id, "confirm_action", payload, expires)], apply)
        raise Paused()
