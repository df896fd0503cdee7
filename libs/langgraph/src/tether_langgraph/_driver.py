"""One execution of a graph run on its host (tether_runtime.engine.driven.DrivenRun): start, resume or
continue the graph from Tether's checkpoint, convert its streams into Tether's events, and turn
its `interrupt()` into a Tether interrupt.

Streams (stream_mode ["messages", "updates", "values", "custom"]), converted:
- `messages`: the text of AI message chunks -> `text_delta` (the host coalesces), with the
  message's id, its node and checkpoint namespace as LangGraph's metadata names them; a whole
  AI message whose chunks were streamed already is skipped by its id.
- `updates`: each node's update -> `graph_update` (as JSON, messages as LangGraph's server
  sends them: _json.py); besides, an AI message's tool calls -> `tool_started`, a ToolMessage
  -> `tool_finished`, paired by the tool call id; the host announces each id once, whatever is
  re-emitted. An interrupt is never an update: the `interrupt` event carries it.
- `values`: the whole state after each step (and once at the start, the input merged) ->
  `graph_values`; one per step, never per token. The state at an interrupt is not sent again
  (the `interrupt` event follows it).

Each graph event carries its step (the checkpoint step an update or a custom write goes into,
or whose state the values show), counted from the checkpoint the stream starts from: a worker
that takes the run over, or a resume, re-runs the node in progress, and LangGraph re-sends the
state it continues from and the updates of the step's finished nodes; the host sends an event
the run's log already has for its step once (DrivenRun.graph_update).
- `custom` (`get_stream_writer()(...)`) -> `custom_data`, whole; a dict in Tether's progress
  convention (`progress` (0..1) or `text`, optionally `call_id` / `tool`, default the call in
  flight) also -> `tool_progress`.

The input: StartRun's `input_json` when given (the object, whole), else the agent's
`input(text)`. The end: the final state is stored with the run and sent in `done`
(`output_json`); the answer text is the agent's `output(state)`, else the last AI message's
text, else a short JSON of the state."""

from __future__ import annotations

import contextvars
import hashlib
import json
from collections.abc import Callable
from typing import Any, Protocol

from langchain_core.messages import AIMessage, AIMessageChunk
from tether_sdk import Limits

from tether_langgraph._checkpointer import checkpointer_for, lease_lost_type
from tether_langgraph._interrupts import UNANSWERED, Question, question_of, resume_value
from tether_langgraph._json import dumps, plain


class GraphSource(Protocol):
    """What a run needs of its agent (a GraphAgent): the graph compiled with a checkpointer,
    its limits, and how the user's message goes in and the answer comes out."""

    @property
    def limits(self) -> Limits: ...

    @property
    def input(self) -> Callable[[str], Any]: ...

    @property
    def output(self) -> Callable[[Any], str] | None: ...

    def compiled(self, checkpointer: Any) -> Any: ...


STREAM_MODES = ["messages", "updates", "values", "custom"]
INTERRUPT_KEY = "__interrupt__"  # LangGraph's key for the interrupts of a step's chunk
SHORT_ANSWER = 2000  # characters of a state shown as the answer of a graph without messages
# Each step's checkpoint is written before the next step's nodes run: a worker whose lease was
# taken over is stopped by its first refused write, before it runs another node.
MAX_ROUNDS = 50  # interrupts answered in one execution (identical repeated questions)

# The host of the run the current task belongs to (write tools find it here).
current_host: contextvars.ContextVar[Any] = contextvars.ContextVar("tether_host", default=None)


def interrupt_key(interrupt_id: str, value: Any) -> str:
    """The Tether call id of a graph interrupt: stable across re-runs of its node (LangGraph's
    interrupt id is its task's; the value tells apart two questions of one node)."""
    raw = interrupt_id + json.dumps(value, sort_keys=True, default=str)
    return "lg_" + hashlib.sha256(raw.encode()).hexdigest()[:32]


class GraphRun:
    def __init__(self, agent: GraphSource, host: Any) -> None:
        self.agent = agent
        self.host = host
        self.graph = agent.compiled(checkpointer_for(host))
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": host.conversation_id},
            "metadata": {"tether_run_id": host.run_id},
            "recursion_limit": max(25, agent.limits.max_steps),
        }
        self._streamed_ids: set[str] = set()
        self._in_flight: tuple[str, str] = ("", "")
        self._step = -1  # the checkpoint step of the state the graph is at
        self._reshown = False  # a stream that continues the graph re-shows its state first

    async def run(self) -> None:
        state = await self.graph.aget_state(self.config)
        mine = (state.metadata or {}).get("tether_run_id") == self.host.run_id
        graph_input: Any
        continues = mine
        if not mine:
            given = self.host.graph_input
            graph_input = given if given is not None else self.agent.input(self.host.user_text)
        elif state.interrupts:
            graph_input = await self._answer(state)
        elif state.next:
            graph_input = None  # a worker stopped mid-graph: continue from the checkpoint
        else:
            await self._finish(state.values)
            return
        for _ in range(MAX_ROUNDS):
            await self._stream(graph_input, state, continues=continues)
            continues = True
            state = await self.graph.aget_state(self.config)
            if not state.interrupts:
                if state.next:  # stopped with nodes to run and no question (a breakpoint)
                    raise RuntimeError("the graph stopped without an interrupt()")
                await self._finish(state.values)
                return
            graph_input = await self._answer(state)
        raise RuntimeError("the graph kept asking the same question")

    async def _stream(self, graph_input: Any, state: Any, *, continues: bool) -> None:
        """Stream the graph from `state` (its checkpoint): with a new input, or continuing it
        (None after a takeover, a Command with an answer)."""
        at = (state.metadata or {}).get("step")
        if continues:  # LangGraph first re-shows the state it continues from
            self._step, self._reshown = (at if at is not None else -1), True
        else:  # the input makes a checkpoint (the step after `at`) before the graph starts
            self._step, self._reshown = (at if at is not None else -2) + 1, False
        lost = lease_lost_type()
        token = current_host.set(self.host)
        try:
            async for mode, chunk in self.graph.astream(
                graph_input, self.config, stream_mode=STREAM_MODES, durability="sync"
            ):
                if mode == "messages":  # per token: one call, no other dispatch
                    await self._message(*chunk)
                else:
                    await self._on(mode, chunk)
        except Exception as err:
            if lost is not None and isinstance(err, lost):
                self.host.lease_lost()  # a checkpoint write after a takeover: a zombie
            raise
        finally:
            current_host.reset(token)

    # -- interrupts --------------------------------------------------------------------------

    async def _answer(self, state: Any) -> Any:
        """The Command that resumes the state's (first) interrupt with a person's answer; a
        question nobody has answered yet is raised (persisted, announced, with the node that
        asked and the nodes a resume runs) and the run pauses."""
        from langgraph.types import Command

        interrupt = state.interrupts[0]
        question: Question = question_of(interrupt.value)
        key = interrupt_key(interrupt.id, interrupt.value)
        answer = await self.host.answer(key)
        if answer is None:
            await self.host.flush()
            await self.host.interrupt(
                key,
                question.kind,
                question.fields,
                action=question.action,
                scope=question.scope,
                value=plain(interrupt.value),
                node=_asking_node(state, interrupt.id),
                next_nodes=[str(n) for n in state.next or ()],
            )
        value = resume_value(question, answer)
        if value is UNANSWERED:
            self.host.fail(
                "INTERRUPT_UNANSWERED",
                f"Nobody answered the agent's question ({answer.decision}); the graph was not "
                "resumed.",
            )
        return Command(resume={interrupt.id: value})

    # -- streams -----------------------------------------------------------------------------

    async def _on(self, mode: str, chunk: Any) -> None:
        if mode == "messages":
            await self._message(*chunk)
        elif mode == "updates":
            finished = False
            for node, update in (chunk or {}).items():
                if node not in _NOT_NODES:
                    finished = True
                    await self.host.graph_update(str(node), plain(update), self._task_step())
                    await self._update(update)
            if finished:
                await self.host.node_done()
        elif mode == "values":
            if isinstance(chunk, dict) and INTERRUPT_KEY in chunk:
                return  # the state at an interrupt was sent with its step; `interrupt` follows
            if self._reshown:
                self._reshown = False
            else:
                self._step += 1
            await self.host.graph_values(plain(chunk), self._step)
        elif mode == "custom":
            await self.host.custom_data(plain(chunk), self._task_step())
            if isinstance(chunk, dict) and _PROGRESS_KEYS & chunk.keys():
                await self._progress(chunk)

    def _task_step(self) -> int:
        """The step the running nodes write into: the one after the state last shown."""
        self._reshown = False
        return self._step + 1

    async def _message(self, message: Any, meta: Any) -> None:
        """One item of the `messages` stream: a token's chunk, or a whole message. Runs per
        token: the chunk's class is checked first (the common case), the metadata read once."""
        kind = type(message)
        if kind is not _AI_CHUNK:
            if not isinstance(message, _AI_TYPES):
                return
            if not isinstance(message, _AI_CHUNK) and message.id in self._streamed_ids:
                return  # its chunks were streamed
        message_id = message.id
        if message_id:
            self._streamed_ids.add(message_id)
        if not isinstance(meta, dict):
            meta = {}
        await self.host.text(
            _text(message.content),
            message_id=str(message_id or ""),
            node=str(meta.get("langgraph_node") or ""),
            namespace=str(meta.get("langgraph_checkpoint_ns") or ""),
        )

    async def _update(self, update: Any) -> None:
        from langchain_core.messages import AIMessage, ToolMessage

        for message in _messages_of(update):
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call.get("id"):
                        self._in_flight = (str(call["id"]), call["name"])
                        await self.host.tool_started(call["id"], call["name"], dict(call["args"]))
            elif isinstance(message, ToolMessage):
                ok = message.status != "error"
                summary = _text(message.content)[:500]
                name = message.name or self._in_flight[1] or "tool"
                await self.host.tool_finished(message.tool_call_id, name, ok, summary)

    async def _progress(self, chunk: dict[str, Any]) -> None:
        call_id, tool = self._in_flight
        raw: Any = chunk.get("progress", chunk.get("fraction", 0.0))
        try:
            fraction = float(raw)
        except (TypeError, ValueError):
            fraction = 0.0
        text = str(chunk.get("text") or "")
        call_id = str(chunk.get("call_id") or call_id)
        tool = str(chunk.get("tool") or tool)
        await self.host.tool_progress(call_id, tool, fraction, text)

    async def _finish(self, values: Any) -> None:
        await self.host.finish(self._output(values), plain(values))

    def _output(self, values: Any) -> str:
        if self.agent.output is not None:
            return str(self.agent.output(values))
        from langchain_core.messages import AIMessage

        if isinstance(values, str):  # e.g. an @entrypoint that returns its answer
            return values
        messages = values.get("messages") if isinstance(values, dict) else None
        if not messages:
            # A graph whose state holds no messages: its state, short, as the answer.
            shown = dumps(values)
            return shown if len(shown) <= SHORT_ANSWER else shown[: SHORT_ANSWER - 1] + "…"
        for message in reversed(messages):
            if isinstance(message, AIMessage):
                return _text(message.content)
        return ""


# The `messages` stream's AI messages: a token's chunk (AIMessageChunk, checked first) or a
# whole message (an AIMessage a node returned without streaming it).
_AI_CHUNK = AIMessageChunk
_AI_TYPES = (AIMessage, AIMessageChunk)
_PROGRESS_KEYS = frozenset({"progress", "fraction", "text"})
# Keys of an `updates` chunk that are no node: the step's interrupts, and LangGraph's metadata
# ({"cached": True} on the updates of a step's finished nodes, re-sent when it continues).
_NOT_NODES = frozenset({INTERRUPT_KEY, "__metadata__"})


def _asking_node(state: Any, interrupt_id: str) -> str:
    """The name of the task (node) of the state whose interrupt this is."""
    for task in state.tasks or ():
        if any(i.id == interrupt_id for i in task.interrupts or ()):
            return str(task.name)
    return ""


def _messages_of(update: Any) -> list[Any]:
    """The messages a node's update writes (a dict with "messages", or a list of such)."""
    if isinstance(update, list | tuple):
        return [m for u in update for m in _messages_of(u)]
    if not isinstance(update, dict):
        return []
    found = update.get("messages")
    if found is None:
        return []
    return list(found) if isinstance(found, list | tuple) else [found]


def _text(content: Any) -> str:
    """A message's text: a string, or the text blocks of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b if isinstance(b, str) else str(b.get("text") or "")
            for b in content
            if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
        )
    return ""
