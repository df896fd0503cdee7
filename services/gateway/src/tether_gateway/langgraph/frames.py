"""A Tether run's events as LangGraph stream events, for one stretch (stretches.py). The run is
read from its first event so that the state (`values`) is whole at any point; only the target
stretch's events past the client's cursor are sent. Deterministic: any pod that reads the same
log sends the same frames with the same ids, which is what makes a join exact.

Modes: `values` (the state after each step), `updates` ({node: update}; an interrupt as
{"__interrupt__": [...]}), `messages-tuple` (event `messages`: [chunk, metadata]), `messages`
(`messages/metadata`, `messages/partial`, `messages/complete`), `custom` (a tool's progress).
`metadata` ({"run_id", "attempt": 1}) opens each stretch whatever the modes.

A graph agent's run carries LangGraph's own stream (GraphValues, GraphUpdate, CustomData: sent
as they are; the runtime sends each step's once, so a stretch after a pause opens with the state
it continues from, sent from here), and its text deltas name the message (its id in the state)
and the node as LangGraph's `messages` stream does; a native agent's is built from its events
(ToolStarted / ToolFinished as the `agent` and `tools` nodes' updates, the state as
`{"messages": [...]}`)."""

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
        # the end comes before any (needs_history). A graph's state may be no dict at all (an
        # @entrypoint's None), so whether it is known is its own flag.
        self.graph_state: Any = None
        self.has_state = False
        self.state: list[dict[str, Any]] = []
        if history is not None:
            self.set_history(history)
        self.interrupts: list[dict[str, Any]] = []
        # A graph's interrupt: the node that asked and the nodes a resume runs (LangGraph's
        # task name and state `next`); empty for a native agent's.
        self.asking: tuple[str, list[str]] = ("", [])
        self.stretch = 0
        self.open = True  # the current stretch has not ended yet
        self.done = False
        self.pending: _Pending | None = None
        # A graph's message ids streamed or in a state already (not sent again as messages).
        self._seen_messages: set[str] = set()
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
        if self.has_state or not self.graph:
            return False
        return ev is None or ev.WhichOneof("event") == "interrupt"

    def set_history(self, history: list[dict[str, Any]]) -> None:
        """The thread's messages up to the run's own: the state the run starts from."""
        if not self.has_state:
            self.graph_state = {"messages": list(history)}
            self.state = list(history)
            self.has_state = True

    def values(self) -> Any:
        """The state as LangGraph's `values` shows it: a dict with the pending interrupts under
        `__interrupt__`; a graph's state that is no dict (an @entrypoint's value: None, a
        string, a list) as it is, or `{"__interrupt__": [...]}` alone at an interrupt."""
        if not self.has_state:
            raise RuntimeError("the thread's messages were not read (needs_history)")
        state: Any = self.graph_state if self.graph else {"messages": self.state}
        if not isinstance(state, dict):
            return {"__interrupt__": list(self.interrupts)} if self.interrupts else state
        out = dict(state)
        if self.interrupts:
            out["__interrupt__"] = list(self.interrupts)
        return out

    def _step(self, node: str, update: dict[str, Any]) -> None:
        self._emit("updates", "updates", {node: update})
        self._emit("values", "values", self.values())

    def _meta(self, node: str, namespace: str = "") -> dict[str, Any]:
        meta = {"langgraph_node": node, "run_id": self.run_id, "thread_id": self.thread_id}
        if namespace:  # a graph's: its node's checkpoint namespace, under both of LangGraph's keys
            meta["langgraph_checkpoint_ns"] = meta["checkpoint_ns"] = namespace
        return meta

    # -- input --

    def feed(self, ev: events_pb2.RunEvent) -> list[Frame]:
        self._seq, self._k = ev.sequence, 0
        self._out = []
        kind = ev.WhichOneof("event")
        if starts_stretch(ev) and not self.open:
            self.stretch += 1
            self.open = True
            self.interrupts = []
            self.asking = ("", [])
            self._emit("", "metadata", {"run_id": self.run_id, "attempt": 1})
            if self.graph:  # as LangGraph's resumed run: first the state it continues from
                self._emit("values", "values", self.values())
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
            self.has_state = True
            self._seen_messages.update(_message_ids(self.graph_state))
            self._emit("values", "values", self.values())
        elif kind == "graph_update":
            node = ev.graph_update.node
            update = orjson.loads(ev.graph_update.update_json or "null")
            self._emit("updates", "updates", {node: update})
            # As LangGraph's `messages` mode: a message a node returns that was neither streamed
            # nor in the state before (e.g. the `tools` node's ToolMessage), whole, with its node.
            for m in _messages_in(update):
                if m["id"] not in self._seen_messages:
                    self._seen_messages.add(m["id"])
                    self._emit("messages-tuple", "messages", [m, self._meta(node)])
        elif kind == "custom_data":
            self._emit("custom", "custom", orjson.loads(ev.custom_data.data_json or "null"))
        elif kind == "done" and ev.done.output_json:
            self.graph_state = orjson.loads(ev.done.output_json)
            self.has_state = True

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
        self.asking = (i.payload.graph_node, list(i.payload.graph_next))
        self._emit("updates", "updates", {"__interrupt__": [raised]})
        self._emit("values", "values", self.values())

    def _text(self, d: events_pb2.TextDelta) -> None:
        if self.graph:  # a graph's messages are in its state: only the chunks are streamed,
            # with the id of the message in the state and the node that streams it
            meta = self._meta(d.graph_node or AGENT_NODE, d.graph_namespace)
            chunk = messages.ai_chunk(d.delta, d.graph_message_id or d.message_id)
            self._seen_messages.add(chunk["id"])
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


def _message_ids(state: Any) -> set[str]:
    """The ids of the messages in a graph's state (its `messages` key)."""
    found = state.get("messages") if isinstance(state, dict) else None
    if not isinstance(found, list):
        return set()
    return {str(m["id"]) for m in found if isinstance(m, dict) and m.get("id")}


def _messages_in(update: Any) -> list[dict[str, Any]]:
    """The messages (with an id) a node's update writes: a dict's `messages`, one or a list."""
    if isinstance(update, list):
        return [m for u in update for m in _messages_in(u)]
    found = update.get("messages") if isinstance(update, dict) else None
    if isinstance(found, dict):
        found = [found]
    if not isinstance(found, list):
        return []
    return [m for m in found if isinstance(m, dict) and m.get("id") and m.get("type")]
