"""Agents that drive their own loop (a LangGraph graph, `tether_langgraph.GraphAgent`): the seam.

Such an agent has `async def drive(host)`; the engine calls it instead of its own model-step
loop and hands it a `DrivenRun`, the run's host. The host is all the agent sees of the engine,
and every one of its methods goes through the run's one write path (run_writer.py), fenced by
the lease epoch: text deltas (coalesced as native text), tool events (each call id announced
once, persisted with the run's checkpoint), interrupts (persisted before they are announced,
resolved by resume.py's one resume order) and at-most-once write calls (the tool-call claim and
its idempotency key). The engine imports nothing of the agent's framework: only an agent that
has `drive` is driven."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol, runtime_checkable

from tether_common.redaction import redact_value
from tether_proto.wire import ToolCallStatus
from tether_sdk import ToolResult

from tether_runtime import metrics, policy
from tether_runtime.domain import events as ev
from tether_runtime.engine import cards, questions
from tether_runtime.engine.run_context import DrivenHost
from tether_runtime.engine.run_outcomes import Finished, Paused, RunFailure
from tether_runtime.engine.tool_results import failure, result_body
from tether_runtime.engine.write_call import Write, WriteCall
from tether_runtime.store import event_log, interrupts
from tether_runtime.store.db import STORE_ERRORS, Conn
from tether_runtime.streams.run_writer import ThenSave

log = logging.getLogger(__name__)

NO_VALUE: Any = object()
"""No value given (None is a value: a graph may interrupt with None or end with a None state)."""
# A question's card fields a driven agent may fill besides its title and prompt.
_QUESTION_CARD = ("target", "parameter_summary", "reason", "preview")

# A graph's own events read back per query by a worker that continues the graph.
_LOG_PAGE = 256
# The interrupt kinds a driven agent may raise (outcome_unknown is the engine's own).
KINDS = frozenset({"confirm_action", "provide_input", "select_option"})
# How a run leaves the loop, or loses its lease or store: never the agent's failure.
_PASS_THROUGH: tuple[type[BaseException], ...] = (
    Paused,
    Finished,
    RunFailure,
    event_log.Fenced,
    *STORE_ERRORS,
)


@runtime_checkable
class DrivenAgent(Protocol):
    async def drive(self, host: Any) -> None: ...


def is_driven(agent: object) -> bool:
    """Whether `agent` drives its own loop (DrivenAgent's `drive`). Asked on every start and
    execution: a look-up of the method, not isinstance on the runtime-checkable Protocol, which
    walks the Protocol's members on every call (0.6 % of the runtime's samples in short runs)."""
    return callable(getattr(agent, "drive", None))


@dataclass(frozen=True)
class Answer:
    """A person's answer to an interrupt the driven agent raised: the kind, the decision
    (approved / rejected / expired / responded) and, for a question, its checked content (the
    `data` of questions.answer: {"fill": {...}} or {"option": "..."})."""

    kind: str
    decision: str
    data: dict[str, Any]


class DrivenRun:
    """The host a driven agent runs its loop on (one per execution of the run)."""

    def __init__(self, x: DrivenHost) -> None:
        self.x = x
        self._pending_text = ""
        self._pending_source = ("", "", "")  # the graph's message id, node, namespace
        self._last_flush = time.monotonic()
        # The graph events earlier executions of the run sent (by _graph_key), read once, and
        # this execution's.
        self._logged: Counter[tuple[str, int, str, bytes]] | None = None
        self._sent: Counter[tuple[str, int, str, bytes]] = Counter()

    # -- what the agent may read -----------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.x.run_id

    @property
    def conversation_id(self) -> str:
        return self.x.run.conversation_id

    @property
    def user_id(self) -> str:
        return self.x.run.user_id

    @property
    def agent_name(self) -> str:
        return self.x.loaded.name

    @property
    def epoch(self) -> int:
        return self.x.epoch

    @property
    def user_text(self) -> str:
        """The message that started the run."""
        for m in reversed(self.x.checkpoint.messages):
            if m.get("role") == "user":
                return str(m.get("content") or "")
        return ""

    @property
    def graph_input(self) -> dict[str, Any] | None:
        """The graph's input as StartRun's `input_json` gave it (stored with the run, so a late
        start or a takeover gets the same); None when the run started from its text."""
        return self.x.run.input

    @property
    def database_url(self) -> str:
        return self.x.database_url

    @property
    def pool(self) -> Any:
        """The engine's pool, for the agent's checkpointer (its writes fenced by `epoch`)."""
        return self.x.pool

    def time_left(self) -> float:
        return self.x.time_left()

    def lease_lost(self) -> NoReturn:
        """The agent's own store refused a write: another worker took the run over."""
        raise event_log.Fenced(self.run_id)

    def fail(self, code: str, message: str) -> NoReturn:
        """End the run in error (a message for a person)."""
        raise RunFailure(code, message)

    # -- the loop ------------------------------------------------------------------------------

    async def execute(self) -> NoReturn:
        drive = self.x.loaded.agent.drive  # type: ignore[attr-defined]
        try:
            async with asyncio.timeout(max(0.001, self.x.time_left())):
                await drive(self)
            await self.finish(self.x.checkpoint.text)
        except TimeoutError:
            limit = self.x.loaded.agent.limits.run_deadline_s
            raise RunFailure(
                "DEADLINE_EXCEEDED",
                f"The run worked for longer than its {limit:g} s limit and was stopped.",
            ) from None
        except _PASS_THROUGH:
            raise
        except Exception as err:
            # The graph's own failure: said without its message (it may quote a secret).
            log.exception("driven agent failed")
            raise RunFailure(
                "AGENT_ERROR", f"The agent failed ({type(err).__name__}); the run was stopped."
            ) from err

    # -- events ------------------------------------------------------------------------------

    async def text(
        self, delta: str, *, message_id: str = "", node: str = "", namespace: str = ""
    ) -> None:
        """Streamed answer text; coalesced like a native model step's. After a takeover (or a
        resume) the node in progress runs again from its start: the text it already streamed
        (counted since the last finished node) is skipped by length, as for a native
        deterministic model; a model that answers differently the second time shows a seam.

        `message_id`, `node`, `namespace`: where the graph says the text belongs (its message's
        id, the node streaming it, the node's checkpoint namespace), carried by each
        `text_delta`: text of another message or node is never coalesced with the text before
        it. (A re-run node's model call gets a new message id from LangChain: after a takeover
        the text streamed before it kept the first id.)"""
        if self.x.resume_skip and delta:
            n = min(self.x.resume_skip, len(delta))
            self.x.resume_skip -= n
            delta = delta[n:]
        if not delta:
            return
        source = (message_id, node, namespace)
        if source != self._pending_source:
            await self.flush()
            self._pending_source = source
        self._pending_text += delta
        if time.monotonic() - self._last_flush >= self.x.coalesce_s:
            await self.flush()

    async def flush(self) -> None:
        piece, self._pending_text = self._pending_text, ""
        self._last_flush = time.monotonic()
        if not piece:
            return
        self.x.checkpoint.text += piece
        message_id, node, namespace = self._pending_source
        delta = ev.text_delta(
            self.x.checkpoint.message_id,
            piece,
            graph_message_id=message_id,
            graph_node=node,
            graph_namespace=namespace,
        )
        await self.x.emit([delta], streamed=len(piece))
        await self.x.stop_if_cancelled()

    async def node_done(self) -> None:
        """A node finished (its update streamed): the text streamed so far will not be streamed
        again by a re-run, so it no longer counts for the skip."""
        await self.flush()
        await self.x.commit([], self.x.save(reset_streamed=True))
        if self.x.cancel_requested:  # a cancel asked while the node ran: stop between nodes
            await self.x.end_cancelled()

    def _announced(self, what: str) -> list[str]:
        seen: list[str] = self.x.checkpoint.driver.setdefault(what, [])
        return seen

    def _first(self, what: str, call_id: str) -> bool:
        """Whether this is the call's first `what` (started, finished): then it is recorded in
        the checkpoint, which the announcement's statement writes."""
        seen = self._announced(what)
        if call_id in seen:
            return False
        seen.append(call_id)
        return True

    async def tool_started(self, call_id: str, tool: str, args: dict[str, Any]) -> None:
        """Once per call id, whatever the agent re-emits: committed with the checkpoint that
        records it, without waiting (a graph announces a node's tool calls from its update, and
        `node_done` commits right after: one statement for both, durable before the graph goes
        on; a graph that continues after a crash re-sends the update, so it is announced then)."""
        if self._first("started", call_id):
            await self.flush()
            self.x.send([ev.tool_started(call_id, tool, _summary(args))], self.x.save())

    async def tool_finished(self, call_id: str, tool: str, ok: bool, summary: str) -> None:
        """As tool_started: once per call id, with its checkpoint, durable by the next commit."""
        if self._first("finished", call_id):
            await self.flush()
            self.x.send([_finished(call_id, tool, ok, summary)], self.x.save())

    async def tool_progress(self, call_id: str, tool: str, fraction: float, text: str) -> None:
        await self.flush()
        progress = ev.tool_progress(call_id, tool, fraction, cards.cut("progress", text))
        await self.x.emit([progress])

    # A graph's own streams (LangGraph's `updates`, `values` and `custom` modes): events without
    # state, after the text streamed before them, masked like every event's content. `value`:
    # plain JSON (the agent serialises its framework's objects).
    #
    # `step`: the graph step the event belongs to (the checkpoint step an update or a custom
    # write goes into, or whose state the values are). A worker that takes the run over, and a
    # resume, re-run the node in progress from its start (and LangGraph re-sends the updates of
    # the step's nodes that had finished, and the state it continues from): an event the run's
    # log already has for its step is not sent again. Updates and custom writes count (a step's
    # nodes may send the same one twice: the n-th is skipped only if the log has it n times),
    # values are sent once per step and state. Deterministic nodes show each event once; a node
    # that writes something else when re-run shows what it wrote, as its state has it. Without
    # a step, an event is always sent.

    async def graph_update(self, node: str, update: Any, step: int | None = None) -> None:
        await self.flush()
        await self._graph_event(ev.graph_update(node, redact_value(update), step or 0), step)

    async def graph_values(self, values: Any, step: int | None = None) -> None:
        await self.flush()
        event = ev.graph_values(redact_value(values), step or 0)
        await self._graph_event(event, step, once=True)

    async def custom_data(self, data: Any, step: int | None = None) -> None:
        await self.flush()
        await self._graph_event(ev.custom_data(redact_value(data), step or 0), step)

    async def _graph_event(
        self, event: ev.RunEvent, step: int | None, *, once: bool = False
    ) -> None:
        if step is not None:
            key = _graph_key(event)
            logged = await self._logged_since(step)
            self._sent[key] += 1
            sent = self._sent[key]
            if (sent > 1 or logged[key] > 0) if once else sent <= logged[key]:
                return
        await self.x.emit([event])

    async def _logged_since(self, step: int) -> Counter[tuple[str, int, str, bytes]]:
        """The graph events earlier executions of this run sent, from `step` (this execution's
        first: its steps only grow), read once, newest first, back to the first older step."""
        if self._logged is not None:
            return self._logged
        self._logged = Counter()
        before = self.x.run.last_sequence + 1
        if before <= 2:  # only its run_started: the run's first execution
            return self._logged
        async with self.x.pool.acquire() as conn:
            while True:
                page = await event_log.graph_events_before(conn, self.run_id, before, _LOG_PAGE)
                for sequence, event in page:
                    key = _graph_key(event)
                    if key[1] < step:
                        return self._logged
                    self._logged[key] += 1
                    before = sequence
                if len(page) < _LOG_PAGE:
                    return self._logged

    # -- interrupts --------------------------------------------------------------------------

    async def answer(self, key: str) -> Answer | None:
        """The answer to the interrupt raised under `key`; None if it was never raised (the
        agent raises it then). Still waiting: the run pauses."""
        async with self.x.pool.acquire() as conn:
            found = await interrupts.call_and_interrupt(conn, self.run_id, key)
        if found is None:
            return None
        row, intr = found
        if intr.status == "pending":
            raise Paused()
        data = dict((row.result or {}).get("data") or {})
        return Answer(intr.kind, intr.decision or intr.status, data)

    async def interrupt(
        self,
        key: str,
        kind: str,
        fields: dict[str, Any],
        *,
        action: str = "",
        scope: str = "",
        value: Any = NO_VALUE,
        node: str = "",
        next_nodes: tuple[str, ...] | list[str] = (),
    ) -> NoReturn:
        """Persist an interrupt (its tool-call row under `key`, the interrupt, the checkpoint and
        the run's `interrupted` status in one transaction), then announce it; the run pauses.

        `fields`: for confirm_action the card (title, risk, target, tool, parameter_summary,
        reason, details, preview); for a question its arguments (prompt, title, and `schema` for
        provide_input or `options` for select_option), checked as a model's question is, and
        any of the card's target, parameter_summary, reason, preview. `value`: what the graph
        passed to `interrupt()` (plain JSON), kept whole on the card (`value_json`); such an
        interrupt also takes an approve or a reject, or an exact resume value (resume.py).
        `node`, `next_nodes`: a graph's node that asked and the nodes a resume runs (LangGraph's
        task name and state `next`), on the card (`graph_node`, `graph_next`)."""
        if kind not in KINDS:
            raise RunFailure(
                "INVALID_INTERRUPT", f"an interrupt's kind must be one of {sorted(KINDS)}"
            )
        if kind == "confirm_action":
            payload = cards.card(**{f: fields.get(f) for f in cards.FIELDS})
            if payload["risk"] not in ("low", "medium", "high"):
                payload["risk"] = "medium"
            args: dict[str, Any] = {"card": payload}
        else:
            problem = questions.problem(kind, fields)
            if problem is not None:
                raise RunFailure("INVALID_INTERRUPT", f"the agent's question is invalid: {problem}")
            payload = questions.payload(kind, fields)
            payload.update({f: cards.cut(f, fields[f]) for f in _QUESTION_CARD if fields.get(f)})
            args = fields
        if value is not NO_VALUE:
            payload["value"] = value  # masked with the card (cards.pause)
        if node:
            payload["graph_node"] = node
        if next_nodes:
            payload["graph_next"] = [str(n) for n in next_nodes]
        await self.flush()
        run_id = self.run_id

        async def propose(conn: Conn) -> None:
            await interrupts.propose_call(conn, run_id, key, kind, args, key)

        await cards.pause(
            self.x, key, kind, payload, propose, action=action, scope=scope, tool_call=False
        )

    # -- at-most-once writes -----------------------------------------------------------------

    async def once(
        self,
        *,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        action: str,
        scope: str,
        perform: Callable[[str], Awaitable[Any]],
        idempotent_by_key: bool = False,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Perform a write at most once per (run, call id), whatever re-runs the agent makes:
        a call that already finished returns its stored result without calling again; a call a
        dead worker left `executing` is called again only if the external system honours the
        key (idempotent_by_key), else a person decides (outcome_unknown: retry with the same
        key, mark done, or abandon), as for a native write tool. Before the call: the
        tool gate (invariant 7) and the requester's current grant for `action` on `scope`.
        `perform(key)` does the write with the idempotency key; its value is the result."""
        machine = self._machine(
            call_id, tool, args, action, scope, perform, idempotent_by_key, timeout_s
        )
        call = machine.w
        async with self.x.pool.acquire() as conn:
            row = await interrupts.get_call(conn, self.run_id, call.call_id)
        if (
            row is not None
            and row.status in (ToolCallStatus.SUCCEEDED, ToolCallStatus.FAILED)
            and row.result is not None
        ):
            await self._announce_finish(call, row.result)  # e.g. a person marked it done
            return row.result
        key = row.idempotency_key if row is not None else f"{self.run_id}:{call.call_id}"
        if row is not None and row.status == ToolCallStatus.EXECUTING:
            await self.flush()
            return await self._finish(machine, await machine.recover(key, None))
        if row is not None and row.status == ToolCallStatus.UNKNOWN:
            raise Paused()  # a person decides whether it happened
        if (
            row is not None and row.status == ToolCallStatus.APPROVED
        ):  # the person chose: try it again
            await self.flush()
            await self.x.commit([], machine.claim(key, ToolCallStatus.APPROVED))
            return await self._finish(machine, await machine.perform(key, None))
        if (
            row is not None and row.status == ToolCallStatus.REJECTED
        ):  # abandoned, or nobody answered
            async with self.x.pool.acquire() as conn:
                intr = await interrupts.for_call(conn, self.run_id, call.call_id)
            decision = (intr.decision if intr is not None else None) or "abandoned"
            body = failure(f"outcome unknown, not tried again ({decision})", "abandoned")
            await self._announce_finish(call, body)
            return body
        if row is not None:  # a call id the agent used for something else
            raise RunFailure("INVALID_TOOL_CALL", f"tool call id {call.call_id!r} was used twice")
        agent = self.agent_name
        if not await self.x.gate.allows(self.x.pool, agent, [call.tool], call.tool, self.user_id):
            return await self._refuse(
                call, failure(f"{call.tool}: blocked by the tool policy", "blocked")
            )
        async with self.x.pool.acquire() as conn:
            allowed = await policy.granted(conn, self.user_id, call.action, call.scope)
        if not allowed:
            why = f"{self.user_id} may not {call.action} on {call.scope}"
            return await self._refuse(call, failure(why, "denied"))
        await self.flush()
        started: list[ev.RunEvent] = []
        if self._first("started", call.call_id):
            started.append(ev.tool_started(call.call_id, call.tool, _summary(call.args)))
        await self.x.commit(started, machine.claim(key, "new"))
        return await self._finish(machine, await machine.perform(key, None))

    def _machine(
        self,
        call_id: str,
        tool: str,
        args: dict[str, Any],
        action: str,
        scope: str,
        perform: Callable[[str], Awaitable[Any]],
        idempotent_by_key: bool,
        timeout_s: float | None,
    ) -> WriteCall:
        """The at-most-once machine (write_call.py) for a graph write tool's call: called once
        (the graph handles a failure), never reconciled, never retried unless a person says so;
        its claims carry the checkpoint (the calls announced), and the audit log stays the
        native tools'."""

        async def invoke(key: str, approver: str | None, attempt: int) -> dict[str, Any]:
            own = timeout_s or self.x.loaded.agent.limits.tool_timeout_s
            timeout = max(0.001, min(own, self.x.time_left()))
            try:
                async with asyncio.timeout(timeout):
                    value = await perform(key)
                return _body_of(tool, value)
            except TimeoutError:
                return failure(f"{tool} timed out after {timeout:g} s; not tried again", "unknown")
            except Exception as err:  # noqa: BLE001 - the tool's failure is the graph's to handle
                log.warning("write tool %s failed: %s", tool, type(err).__name__)
                return failure(f"{tool} failed: {err}")

        write = Write(
            call_id=call_id,
            tool=tool,
            args=args,
            action=action,
            scope=scope,
            risk="high",
            summary=_summary(args),
            invoke=invoke,
            idempotent_by_key=idempotent_by_key,
            audited=False,
            saves_on_claim=True,
        )
        return WriteCall(self.x, write)

    async def _announce_finish(self, call: Write, body: dict[str, Any]) -> None:
        """A started call's end, settled by a person: its `tool_finished`, once, durable before
        the graph gets the result (the graph does not call the tool again, so nothing would
        announce it after a crash)."""
        if call.call_id in self._announced("started") and self._first("finished", call.call_id):
            await self.flush()
            finished = _finished(call.call_id, call.tool, bool(body["ok"]), str(body["summary"]))
            await self.x.commit([finished], self.x.save())

    async def _finish(self, machine: WriteCall, body: dict[str, Any]) -> dict[str, Any]:
        call = machine.w
        metrics.TOOL_CALLS.labels(tool=call.tool, status="ok" if body["ok"] else "error").inc()
        finished = (
            [ev.tool_finished(call.call_id, call.tool, body["ok"], body["summary"])]
            if self._first("finished", call.call_id)
            else []
        )
        await self.x.commit(finished, ThenSave(machine.finish(body), self.x.save()))
        return body

    async def _refuse(self, call: Write, body: dict[str, Any]) -> dict[str, Any]:
        """A write that may not run: recorded as failed without a claim (never performed)."""
        metrics.TOOL_CALLS.labels(tool=call.tool, status=body["outcome"]).inc()
        run_id = self.run_id

        async def apply(conn: Conn) -> None:
            key = f"{run_id}:{call.call_id}"
            await interrupts.propose_call(
                conn, run_id, call.call_id, call.tool, call.args, key, ToolCallStatus.FAILED
            )
            await interrupts.settle_call(conn, run_id, call.call_id, body["summary"], body)

        await self.x.commit([], apply)
        return body

    # -- the end -----------------------------------------------------------------------------

    async def finish(self, text: str, output: Any = NO_VALUE) -> NoReturn:
        """The run completes: `text` is stored as the assistant's answer, then `done`.
        `output`: a graph's final state (plain JSON), masked, stored with the run (GetRun's
        `output_json`) and carried by `done`."""
        await self.flush()
        cp = self.x.checkpoint
        if output is not NO_VALUE:
            cp.output = ev.json_text(redact_value(output))
        await self.x.end(
            "completed",
            [ev.done(cp.message_id, cp.input_tokens, cp.output_tokens, cp.steps, cp.output)],
            answer=text or cp.text,
            save=True,
        )
        raise AssertionError("end() raises Finished")  # pragma: no cover


def _graph_key(event: ev.RunEvent) -> tuple[str, int, str, bytes]:
    """What tells a graph event apart from another: its kind, step, node and content (masked, as
    stored; digested)."""
    kind = ev.kind_of(event)
    if kind == "graph_update":
        u = event.graph_update
        step, node, body = u.step, u.node, u.update_json
    elif kind == "graph_values":
        step, node, body = event.graph_values.step, "", event.graph_values.values_json
    else:
        step, node, body = event.custom_data.step, "", event.custom_data.data_json
    return (kind, step, node, hashlib.blake2b(body.encode(), digest_size=16).digest())


def _finished(call_id: str, tool: str, ok: bool, summary: str) -> ev.RunEvent:
    """A call's `tool_finished` as a driven agent announces it (its summary cut)."""
    return ev.tool_finished(call_id, tool, ok, cards.cut("summary", summary))


def _summary(args: dict[str, Any]) -> str:
    return cards.cut("summary", ", ".join(f"{k}={v}" for k, v in sorted(args.items())))


def _body_of(tool: str, value: Any) -> dict[str, Any]:
    """A write's return value as a stored result: its text as the summary, the value as data."""
    if isinstance(value, ToolResult):
        return result_body(value)
    summary = value if isinstance(value, str) else f"{tool} done"
    return result_body(ToolResult(summary, {"value": value}))
