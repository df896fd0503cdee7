"""Executes one claimed run from its checkpoint until it pauses, ends, or loses its lease: model
steps, then the tool calls they ask for (tool_calls.py), within the agent's limits.

Every write goes through `commit`: the events, the state they announce and the fence check share
one transaction; Redis hears of them only after commit."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from opentelemetry import trace
from tether_common.ids import new_id
from tether_common.run_bus import EventBus
from tether_sdk import ModelRequest

from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import ConversationRow, MessageRow, RunRow
from tether_runtime.engine import driven, questions
from tether_runtime.engine.agent import context
from tether_runtime.engine.checkpoint import Checkpoint, PendingCall, pending_message_id
from tether_runtime.engine.held_wakes import HeldWakes
from tether_runtime.engine.loaded_agent import LoadedAgent
from tether_runtime.engine.model_step import ModelStep
from tether_runtime.engine.process import Engine
from tether_runtime.engine.run_outcomes import Finished, Paused, RunFailure
from tether_runtime.engine.tool_calls import ToolCalls
from tether_runtime.policy.gate import ToolGate
from tether_runtime.store import conversations, runs
from tether_runtime.store.db import Pool
from tether_runtime.store.event_log import RunEnd
from tether_runtime.streams.run_writer import Apply, EndRun, RunWriter, SaveCheckpoint

log = logging.getLogger(__name__)
tracer = trace.get_tracer("tether.runtime.run_loop")


class RunExecutor:
    def __init__(
        self,
        engine: Engine,
        run: RunRow,
        conversation: ConversationRow | None = None,
        turns: list[MessageRow] | None = None,
    ) -> None:
        """`conversation`: the run's, as the claim read it (None: read at the first step).
        `turns`: for a run whose context is still to be built, its own message and the turns
        before it as the claim read them (runs.Claimed.turns; None: read when it is built)."""
        self.e = engine
        self.run = run
        self.epoch = run.lease_epoch
        self.cp = Checkpoint.from_json(run.checkpoint)
        self.cancel_requested = run.cancel_requested
        self.resume_skip = run.step_streamed
        self.agent: LoadedAgent | None = engine.agents.agents.get(run.agent)
        self.writer = RunWriter(
            engine.pool,
            engine.bus,
            engine.sink,
            run.id,
            run.lease_epoch,
            run.last_sequence,
            ride_out_s=engine.settings.store_ride_out_s,
        )
        self.calls = ToolCalls(self)
        # Calls that a step of THIS executor made pending, after the step's commit: no row of
        # theirs can exist but one this executor writes (their ids are new with the step, and
        # the lease fences every other writer), so their first processing skips the lookup.
        self.fresh_calls: set[str] = set()
        self._claimed_at = time.monotonic()
        self._conv: ConversationRow | None = conversation
        self._turns = turns

    @property
    def run_id(self) -> str:
        return self.run.id

    @property
    def interrupt_ttl_s(self) -> float:
        return self.e.settings.interrupt_ttl_s

    async def db_now(self) -> datetime:
        return await self.e.clock.now()

    @property
    def coalesce_s(self) -> float:
        return self.e.settings.coalesce_s

    @property
    def database_url(self) -> str:
        return self.e.settings.database_url

    @property
    def pool(self) -> Pool:
        return self.e.pool

    @property
    def gate(self) -> ToolGate:
        return self.e.gate

    @property
    def bus(self) -> EventBus:
        return self.e.bus

    @property
    def held(self) -> HeldWakes:
        return self.e.held

    async def rejoin(self) -> None:
        await self.writer.rejoin()
        self.cancel_requested = self.cancel_requested or self.writer.cancel_requested

    @property
    def checkpoint(self) -> Checkpoint:
        assert self.cp is not None
        return self.cp

    @property
    def loaded(self) -> LoadedAgent:
        assert self.agent is not None
        return self.agent

    # -- the one write path --------------------------------------------------------------

    async def commit(
        self, events: list[ev.RunEvent], apply: Apply | None = None, *, streamed: int = 0
    ) -> None:
        """Events and the state they announce, durable on return (after all queued before)."""
        await self.writer.commit(events, apply, streamed=streamed)
        self.cancel_requested = self.cancel_requested or self.writer.cancel_requested

    async def emit(self, events: list[ev.RunEvent], *, streamed: int = 0) -> None:
        """Events without state (text, progress), queued behind every commit before them."""
        await self.writer.emit(events, streamed=streamed)

    def send(self, events: list[ev.RunEvent], apply: Apply) -> None:
        """Events and the state change that records them, committed together without waiting:
        durable when the next commit returns (RunWriter.send)."""
        self.writer.send(events, apply)

    async def stop_if_cancelled(self) -> None:
        """A cancel the writer heard of (with its last batch) ends the run here."""
        if self.writer.cancel_requested:
            self.cancel_requested = True
            await self.end_cancelled()

    def active_s(self) -> float:
        """Execution time spent on this run so far, by this worker and the ones before it."""
        return self.checkpoint.active_s + (time.monotonic() - self._claimed_at)

    def save(self, *, reset_streamed: bool = False) -> SaveCheckpoint:
        """The checkpoint as of now, to commit (alone, it goes through the shared statement)."""
        return SaveCheckpoint(self.run.id, self.epoch, self._snapshot(), reset_streamed)

    def _snapshot(self) -> str:
        """The checkpoint as of now, encoded once, with the time spent so far."""
        cp = self.checkpoint
        spent = cp.active_s
        cp.active_s = self.active_s()
        try:
            return cp.to_json()
        finally:
            cp.active_s = spent

    def record(self, call: PendingCall, body: dict[str, Any]) -> None:
        """Give the model a call's result and drop the call from the pending list."""
        self.checkpoint.messages.append(
            {
                "role": "tool",
                "tool_call_id": call.call_id,
                "name": call.tool,
                "content": json.dumps(body),
            }
        )
        self.checkpoint.pending = self.checkpoint.pending[1:]

    # -- the loop ------------------------------------------------------------------------

    async def execute(self) -> str:
        """Returns the status the run left this worker in."""
        try:
            if self.agent is None:
                raise RunFailure(
                    "AGENT_NOT_FOUND",
                    f"This runtime has no agent named {self.run.agent!r} loaded.",
                )
            if self.cp is None:
                await self._start()
            if driven.is_driven(self.loaded.agent):
                # The agent runs its own loop (a LangGraph graph) on this run's write path.
                await driven.DrivenRun(self).execute()
            while True:
                if self.cancel_requested:
                    await self.end_cancelled()
                self._check_deadline()
                if self.checkpoint.pending:
                    await self.calls.process(self.checkpoint.pending[0])
                else:
                    await self._model_step()
        except Paused:
            return "interrupted"
        except RunFailure as failure:
            await self.fail(failure.code, failure.message)
            return "failed"
        except Finished as fin:
            return str(fin)

    def _check_deadline(self) -> None:
        limit = self.loaded.agent.limits.run_deadline_s
        if self.active_s() > limit:
            raise RunFailure(
                "DEADLINE_EXCEEDED",
                f"The run worked for longer than its {limit:g} s limit and was stopped.",
            )

    def time_left(self) -> float:
        return max(0.0, self.loaded.agent.limits.run_deadline_s - self.active_s())

    async def _start(self) -> None:
        """Build the run's starting state: its context as of now and the id its answer streams
        under. StartRun stored the id (checkpoint.pending): nothing is written here, the first
        step saves the state, and a worker that takes the run over first builds the same one.
        A run stored `waiting` behind another, or queued by an earlier release, has no id yet:
        its state is stored before anything streams under a new one."""
        message_id = pending_message_id(self.run.checkpoint)
        budget = context.budget_for(self.loaded)
        turns, self._turns = self._turns, None
        if turns is not None and self._conv is not None:  # as the claim read them
            messages, cut = await context.starting_context(
                self.e.pool,
                self._conv,
                self.run.conversation_id,
                self.run.user_message_id,
                turns,
                budget=budget,
            )
        else:
            messages, cut = await context.initial_context(
                self.e.pool, self.run.conversation_id, self.run.user_message_id, budget=budget
            )
        self.cp = Checkpoint(message_id or new_id("msg"), messages, context_cut=cut)
        if not message_id:
            await self.commit([], self.save())

    async def end(
        self,
        status: str,
        events: list[ev.RunEvent],
        *,
        answer: str | None = None,
        save: bool = False,
    ) -> None:
        """`answer`: the assistant's message, stored under the run's message id; `save`: the
        final checkpoint is written by the same statement that ends the run."""
        cp = self._snapshot() if save and self.cp is not None else None
        answer_id = self.checkpoint.message_id if answer is not None else None
        end = RunEnd(status, answer_id, answer or "")
        await self.commit(
            events, EndRun(self.run.id, self.epoch, self.run.conversation_id, end, cp)
        )
        metrics.RUNS_FINISHED.labels(status=status).inc()
        raise Finished(status)

    async def end_cancelled(self) -> None:
        async with self.e.pool.acquire() as conn:
            reason = await runs.cancel_reason(conn, self.run.id)
        await self.end("cancelled", [ev.cancelled(reason or "cancelled by the user")])

    async def fail(self, code: str, message: str) -> None:
        """The run fails with a message for a person (also called by the worker when execution
        raised). The checkpoint is saved with it: what the run spent (tokens, steps) stays on
        record."""
        try:
            await self.end("failed", [ev.error(code, message)], save=True)
        except Finished:
            pass

    def count_usage(self, input_tokens: int, output_tokens: int) -> None:
        """A model step's tokens: on the checkpoint (saved with the step), and counted."""
        self.checkpoint.add_usage(input_tokens, output_tokens)
        provider, model = self.loaded.provider
        for direction, n in (("input", input_tokens), ("output", output_tokens)):
            if n:
                metrics.MODEL_TOKENS.labels(self.loaded.name, provider, model, direction).inc(n)

    def _check_tokens(self) -> None:
        limit = self.loaded.agent.limits.max_run_tokens
        used = self.checkpoint.total_tokens
        if limit and used > limit:
            raise RunFailure(
                "TOKEN_LIMIT_EXCEEDED",
                f"The run used {used} tokens, more than its limit of {limit}; it was stopped.",
            )

    # -- model steps -----------------------------------------------------------------------

    async def _model_step(self) -> None:
        limit = self.loaded.agent.limits.max_steps
        if self.checkpoint.steps >= limit:
            raise RunFailure(
                "STEP_LIMIT_EXCEEDED",
                f"The agent took {limit} steps without finishing, its limit; the run was stopped.",
            )
        self._check_tokens()  # before spending more: the steps so far are saved
        with tracer.start_as_current_span("model.step"):
            await self._model_step_inner()

    async def _request(self, conv_system: str, facts: dict[str, Any]) -> ModelRequest:
        agent = self.loaded.agent
        # Per user and per step: a tool reserved to a grant's holders is offered only to them,
        # and a grant revoked mid-run stops the next step's offer.
        usable = await self.e.gate.offered(
            self.e.pool, agent.name, [t.name for t in agent.tools], self.run.user_id
        )
        offered = [t.schema() for t in agent.tools if t.name in usable]
        if getattr(self.loaded.model, "provider", None):
            offered += questions.TOOL_SCHEMAS  # a provider's model asks a person by a tool call
        return ModelRequest(
            instructions=agent.instructions,
            context=conv_system,
            messages=self.checkpoint.messages,
            tools=offered,
            facts=facts,
        )

    async def _conversation(self) -> ConversationRow:
        """The run's conversation (its facts and summary, for each step's context): read by the
        claim (or at this executor's first step when it was not), then kept, with the facts this run's own tools confirm merged in
        as they are stored (`confirmed`): one read per execution, not one per step. Facts that
        another run of the same conversation confirms meanwhile reach this run at its next
        execution (after a pause), as they would reach a step already under way."""
        if self._conv is None:
            async with self.e.pool.acquire() as conn:
                conv = await conversations.get(conn, self.run.conversation_id)
            assert conv is not None
            self._conv = conv
        return self._conv

    def confirmed(self, facts: dict[str, Any]) -> None:
        """Facts a tool of this run confirmed (stored with its result): the next step sees them."""
        if self._conv is not None and facts:
            self._conv = replace(self._conv, facts={**self._conv.facts, **facts})

    async def _model_step_inner(self) -> None:
        cp = self.checkpoint
        conv = await self._conversation()
        request = await self._request(
            context.step_context(self.loaded, conv, cp.messages), conv.facts
        )
        # Text of this step that an earlier, crashed attempt already streamed (first step only).
        skip, self.resume_skip = self.resume_skip, 0
        step = await ModelStep(self, request, skip).run()
        msg_id = cp.message_id
        step_text = step.text
        cp.text += step_text
        cp.steps += 1
        self.count_usage(step.input_tokens, step.output_tokens)
        if step.calls:
            # The engine names each call by its step: unique within the run whatever the model
            # sends (some OpenAI-compatible servers send no id, or the same one every step), and
            # stable once this checkpoint is saved, so the call's idempotency key is too.
            ids = [f"call_{cp.steps}_{i}" for i in range(len(step.calls))]
            cp.messages.append(
                {
                    "role": "assistant",
                    "content": step_text,
                    "tool_calls": [
                        {"id": i, "name": c.name, "args": c.args}
                        for i, c in zip(ids, step.calls, strict=True)
                    ],
                }
            )
            cp.pending = [
                PendingCall(i, c.name, c.args, invalid=c.invalid)
                for i, c in zip(ids, step.calls, strict=True)
            ]
            # Committed with the first call's first write (its claim, card or answer).
            self.writer.stage(self.save(reset_streamed=True))
            self.fresh_calls.update(ids)
            return
        try:
            done = ev.done(msg_id, cp.input_tokens, cp.output_tokens, cp.steps)
            await self.end("completed", [done], answer=cp.text, save=True)
        except Finished:
            if cp.context_cut:  # a short conversation has nothing to summarise
                self.e.summaries.run_completed(self.run.conversation_id, self.loaded)
            raise
