"""A Tether run's events as LangGraph stream events, for one stretch (stretches.py). The run is
read from its first event so that the state (`values`) is whole at any point; only the target
stretch's events past the client's cursor are sent. Deterministic: any pod that reads the same
log sends the same frames with the same ids, which is what makes a join exact.

Modes: `values` (the state after each step), `updates` ({node: update}; an interrupt as
{"__interrupt__": [...]}), `messages-tuple` (event `messages`: [chunk, metadata]), `messages`
(`messages/metadata`, `messages/partial`, `messages/complete`), `custom` (a tool's progress).
`metadata` ({"run_id", "attempt": 1}) opens each stretch whatever the modes.

A graph agent's run carries LangGraph's own stream (GraphValues, GraphUpdate, CustomData: sent
as they are); a native agent's is built from its events (ToolStarted / ToolFinished as the
`agent` and `tools` nodes' updates, the state as `{"messages": [...]}`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from tether.runtime.v1 import events_pb2

from tether_gateway.langgraph import ids, messages
from tether_gateway.langgraph.stretches import ending, starts_stretch

MODES = ("values", "updates", "messages-tuple", "messages", "custom")
AGENT_NODE, TOOLS_NODE = "agent", "tools"


@dataclass(frozen=True)
class Frame:
    cursor: ids.Cursor
    event: str
    data: Any

    def encode(self) -> bytes:
        data = orjson.dumps(self.data).decode()
        return f"event: {self.event}\ndata: {data}\nid: {ids.event_id(*self.cursor)}\n\n".encode()


@dataclass
class _Pending:
    """The AI message being written: its text so far and the tool calls it makes."""

    id: str
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    announced: bool = False  # its `messages/metadata` went out


class StretchFrames:
    """Feed a run's events in order; `frames` are the target stretch's, `done` at its end."""

    def __init__(
        self,
        *,
        thread_id: str,
        tether_run_id: str,
        stretch: int,
        history: list[dict[str, Any]] | None,
        modes: frozenset[str],
        after: ids.Cursor = ids.START,
        graph: bool = False,
    ) -> None:
        self.thread_id = thread_id
        self.tether_run_id = tether_run_id
        self.target = stretch
        self.run_id = ids.stretch_run_id(tether_run_id, stretch)
        self.modes = modes
        self.after = after
        self.graph = graph
        if history is None and not graph:
            raise ValueError("a native agent's run needs the thread's messages from the start")
        # A graph's run brings its state in its log (GraphValues, from its first step): the
        # thread's messages (`history`, None until read) are needed only if an interrupt or
        # the end comes before any (needs_history).
        self.graph_state: dict[str, Any] | None = None
        self.state: list[dict[str, Any]] = []
        if history is not None:
            self.set_history(history)
        self.interrupts: list[dict[str, Any]] = []
        self.stretch = 0
        self.open = True  # the current stretch has not ended yet
        self.done = False
        self.pending: _Pending | None = None
        self._out: list[Frame] = []
        self._seq = 0
        self._k = 0

    # -- output --

    def _emit(self, mode: str, event: str, data: Any) -> None:
        if self.stretch != self.target or not self.open:
            return
        cursor = (self._seq, self._k)
        self._k += 1
        if (mode == "" or mode in self.modes) and cursor > self.after:
            self._out.append(Frame(cursor, event, data))

    def needs_history(self, ev: events_pb2.RunEvent | None) -> bool:
        """Whether the thread's messages must be set (set_history) before feeding `ev` (None:
        before values() at the end): a graph's run whose log brought no state yet, at an
        interrupt (sent with the state) or at the end."""
        if self.graph_state is not None or not self.graph:
            return False
        return ev is None or ev.WhichOneof("event") == "interrupt"

    def set_history(self, history: list[dict[str, Any]]) -> None:
        """The thread's messages up to the run's own: the state the run starts from."""
        if self.graph_state is None:
            self.graph_state = {"messages": list(history)}
            self.state = list(history)

    def values(self) -> dict[str, Any]:
        if self.graph_state is None:
            raise RuntimeError("the thread's messages were not read (needs_history)")
        out: dict[str, Any] = dict(self.graph_state) if self.graph else {"messages": self.state}
        if self.interrupts:
            out["__interrupt__"] = list(self.interrupts)
        return out

    def _step(self, node: str, update: dict[str, Any]) -> None:
        self._emit("updates", "updates", {node: update})
        self._emit("values", "values", self.values())

    def _meta(self, node: str) -> dict[str, Any]:
        return {"langgraph_node": node, "run_id": self.run_id, "thread_id": self.thread_id}

    # -- input --

    def feed(self, ev: events_pb2.RunEvent) -> list[Frame]:
        self._seq, self._k = ev.sequence, 0
        self._out = []
        kind = ev.WhichOneof("event")
        if starts_stretch(ev) and not self.open:
            self.stretch += 1
            self.open = True
            self.interrupts = []
            self._emit("", "metadata", {"run_id": self.run_id, "attempt": 1})
        elif ev.sequence == 1:
            self._emit("", "metadata", {"run_id": self.run_id, "attempt": 1})
            if not self.graph:  # a graph sends its first values itself
                self._emit("values", "values", self.values())
        if kind == "text_delta":
            self._text(ev.text_delta)
        elif kind == "interrupt":
            self._interrupt(ev.interrupt)
        elif kind == "error":
            self._commit()
            self._emit("", "error", {"error": ev.error.code, "message": ev.error.message})
        elif self.graph:
            self._graph_event(ev)
        else:
            self._native_event(ev)
        if ending(ev) and self.open:
            if self.stretch == self.target:
                self.done = True
            self.open = False
        return self._out

    def _graph_event(self, ev: events_pb2.RunEvent) -> None:
        """A graph run's own stream, sent as it is (its tool calls and progress come again in
        its updates and custom data: Tether's tool events add nothing)."""
        kind = ev.WhichOneof("event")
        if kind == "graph_values":
            self.graph_state = orjson.loads(ev.graph_values.values_json or "{}")
            self._emit("values", "values", self.values())
        elif kind == "graph_update":
            update = orjson.loads(ev.graph_update.update_json or "null")
            self._emit("updates", "updates", {ev.graph_update.node: update})
        elif kind == "custom_data":
            self._emit("custom", "custom", orjson.loads(ev.custom_data.data_json or "null"))
        elif kind == "done" and ev.done.output_json:
            self.graph_state = orjson.loads(ev.done.output_json)

    def _native_event(self, ev: events_pb2.RunEvent) -> None:
        """A native agent's events as a two-node graph's: `agent` (the model) and `tools`."""
        kind = ev.WhichOneof("event")
        if kind == "tool_started":
            self._tool_started(ev.tool_started, ev.sequence)
        elif kind == "tool_progress":
            progress: dict[str, Any] = {"progress": ev.tool_progress.fraction}
            if ev.tool_progress.text:
                progress["text"] = ev.tool_progress.text
            self._emit("custom", "custom", progress)
        elif kind == "tool_finished":
            self._commit()
            f = ev.tool_finished
            ok = f.status != events_pb2.TOOL_STATUS_ERROR
            result = messages.tool(f.summary, f.call_id, f.tool, ok=ok)
            self.state.append(result)
            self._step(TOOLS_NODE, {"messages": [result]})
        elif kind == "done":
            self._commit()

    def _interrupt(self, i: events_pb2.InterruptRaised) -> None:
        """LangGraph's way: `updates` {"__interrupt__": [...]}, then `values` with the list."""
        self._commit()
        raised = {
            "value": messages.interrupt_value(i.kind, i.payload),
            "id": messages.interrupt_id(i.interrupt_id),
        }
        self.interrupts = [raised]
        self._emit("updates", "updates", {"__interrupt__": [raised]})
        self._emit("values", "values", self.values())

    def _text(self, d: events_pb2.TextDelta) -> None:
        if self.graph:  # a graph's messages are in its state: only the chunks are streamed
            meta = self._meta(AGENT_NODE)
            chunk = messages.ai_chunk(d.delta, d.message_id)
            self._emit("messages-tuple", "messages", [chunk, meta])
            return
        pending = self.pending
        if pending is not None and pending.id != d.message_id:
            self._commit()
            pending = None
        if pending is None:
            pending = self.pending = _Pending(d.message_id)
        pending.text += d.delta
        meta = self._meta(AGENT_NODE)
        self._emit("messages-tuple", "messages", [messages.ai_chunk(d.delta, d.message_id), meta])
        if not pending.announced:
            pending.announced = True
            self._emit("messages", "messages/metadata", {d.message_id: {"metadata": meta}})
        self._emit("messages", "messages/partial", [messages.ai(pending.text, pending.id)])

    def _tool_started(self, t: events_pb2.ToolStarted, sequence: int) -> None:
        if self.pending is None:
            self.pending = _Pending(f"{self.tether_run_id}:{sequence}")
        self.pending.tool_calls.append(messages.tool_call(t.call_id, t.tool, t.args_summary))

    def _commit(self) -> None:
        """The AI message being written is complete: one `agent` step."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        message = messages.ai(pending.text, pending.id, pending.tool_calls)
        self.state.append(message)
        if pending.announced:
            self._emit("messages", "messages/complete", [message])
        self._step(AGENT_NODE, {"messages": [message]})
