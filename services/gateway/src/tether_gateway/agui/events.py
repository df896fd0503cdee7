"""A Tether run's events as AG-UI events, for one AG-UI run: one stretch of the Tether run
(langgraph/stretches.py: from its start, or from a person's answer, to its next interrupt or its
end). The log is read from its first event so that what the earlier stretches did (a tool call
already announced) is known; only the target stretch's events past the client's cursor are
sent. Deterministic: every pod that reads the same log sends the same events with the same SSE
ids (`{sequence}-{k}`: the k-th AG-UI event made from the Tether event of that sequence), which
is what makes a reconnect with `Last-Event-ID` exact. The one exception is STATE_SNAPSHOT's
content: the conversation's facts as they are when it is sent (state, not history).

Tether event -> AG-UI (README "AG-UI" has the table):
  RunStarted, or the InterruptResolved that begins a stretch -> RUN_STARTED + MESSAGES_SNAPSHOT
    (the conversation so far: Tether's stored history wins over the client's copy)
  TextDelta -> TEXT_MESSAGE_START (a new message id) + TEXT_MESSAGE_CONTENT
  ToolStarted -> STEP_STARTED `{tool}:{call id}` + TOOL_CALL_START / ARGS ({"summary": masked
    arguments}) / END
  ToolProgress -> CUSTOM `tether.tool_progress`
  ToolFinished -> TOOL_CALL_RESULT (+ STEP_FINISHED; a call never announced, such as a rejected
    one, gets its START / ARGS / END first)
  GraphUpdate (a graph agent's node) -> STEP_STARTED + STEP_FINISHED `{node}`
  CustomData -> CUSTOM `tether.custom`
  InterruptRaised -> (its tool call's START / ARGS / END, when not announced yet) +
    STATE_SNAPSHOT + RUN_FINISHED {outcome: interrupt, its toolCallId}
  Done -> STATE_SNAPSHOT + RUN_FINISHED {outcome: success}; Cancelled -> RUN_FINISHED
    {outcome: cancelled}; Error -> RUN_ERROR
Whatever is open (a text message, a step) is closed before the run's terminal event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from tether.runtime.v1 import events_pb2

from tether_gateway.agui.interrupts import interrupt_json
from tether_gateway.agui.transcript import Transcript
from tether_gateway.langgraph import ids
from tether_gateway.langgraph.stretches import ending, starts_stretch


@dataclass(frozen=True)
class Frame:
    cursor: ids.Cursor
    event: dict[str, Any]

    @property
    def id(self) -> str:
        return ids.event_id(*self.cursor)

    def encode(self) -> bytes:
        return b"id: " + self.id.encode() + b"\ndata: " + orjson.dumps(self.event) + b"\n\n"


class AguiRun:
    """Feed a Tether run's events in order from sequence 1; `feed` returns the target stretch's
    AG-UI events past `after`; `done` once its terminal event went by. Set `facts` (the
    conversation's) before feeding an event for which `snapshot_due` is true."""

    def __init__(
        self,
        *,
        thread_id: str,
        run_id: str,
        stretch: int,
        after: ids.Cursor = ids.START,
        history: list[dict[str, Any]] | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.target = stretch
        self.after = after
        self.facts: dict[str, Any] = {}
        self.stretch = 0
        self.open = True  # the current stretch has not ended yet
        self.done = False
        self._announced: set[str] = set()  # tool calls whose TOOL_CALL_START went out (any stretch)
        self._text = ""  # the open text message's id
        self._last_text = ""  # the latest text message of the stretch (a tool call's parent)
        self._steps: list[str] = []  # open steps, oldest first
        self._out: list[Frame] = []
        self._seq = 0
        self._k = 0
        # The conversation before the target stretch (its MESSAGES_SNAPSHOT): the stored
        # messages before the run, then what the run's earlier stretches streamed.
        self._transcript = Transcript(history)

    def _emit(self, event: dict[str, Any]) -> None:
        if self.stretch < self.target and self.open:
            self._transcript.apply(event)
        if self.stretch != self.target or not self.open:
            return
        cursor = (self._seq, self._k)
        self._k += 1
        if cursor > self.after:
            self._out.append(Frame(cursor, event))

    def _begins(self, ev: events_pb2.RunEvent) -> bool:
        return ev.sequence == 1 or (starts_stretch(ev) and not self.open)

    def snapshot_due(self, ev: events_pb2.RunEvent) -> bool:
        """Whether this event ends the target stretch with a STATE_SNAPSHOT (set `facts` first)."""
        kind = ev.WhichOneof("event")
        return (
            kind in ("interrupt", "done")
            and self.open
            and self.stretch == self.target
            and not self._begins(ev)
        )

    def feed(self, ev: events_pb2.RunEvent) -> list[Frame]:
        self._seq, self._k = ev.sequence, 0
        self._out = []
        if self._begins(ev):
            if ev.sequence != 1:
                self.stretch += 1
            self.open = True
            self._text = self._last_text = ""
            self._steps = []
            self._emit({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id})
            if self.stretch == self.target:
                snapshot = self._transcript.snapshot()
                self._emit({"type": "MESSAGES_SNAPSHOT", "messages": snapshot})
        kind = ev.WhichOneof("event")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(getattr(ev, str(kind)))
        if ending(ev) and self.open:
            if self.stretch == self.target:
                self.done = True
            self.open = False
        return self._out

    # -- the open message and steps --

    def _close_text(self) -> None:
        if self._text:
            self._emit({"type": "TEXT_MESSAGE_END", "messageId": self._text})
            self._text = ""

    def _close_all(self) -> None:
        self._close_text()
        while self._steps:
            self._emit({"type": "STEP_FINISHED", "stepName": self._steps.pop()})

    def _finish(self, outcome: dict[str, Any], *, snapshot: bool, **extra: Any) -> None:
        self._close_all()
        if snapshot:
            self._emit({"type": "STATE_SNAPSHOT", "snapshot": {"facts": self.facts}})
        self._emit(
            {
                "type": "RUN_FINISHED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                **extra,
                "outcome": outcome,
            }
        )

    # -- Tether's events --

    def _on_text_delta(self, d: events_pb2.TextDelta) -> None:
        if not d.delta:
            return
        if self._text != d.message_id:
            self._close_text()
            self._text = self._last_text = d.message_id
            self._emit(
                {"type": "TEXT_MESSAGE_START", "messageId": d.message_id, "role": "assistant"}
            )
        self._emit({"type": "TEXT_MESSAGE_CONTENT", "messageId": d.message_id, "delta": d.delta})

    def _announce(self, call_id: str, tool: str, args_summary: str) -> None:
        self._close_text()
        self._announced.add(call_id)
        start: dict[str, Any] = {
            "type": "TOOL_CALL_START",
            "toolCallId": call_id,
            "toolCallName": tool,
        }
        if self._last_text:
            start["parentMessageId"] = self._last_text
        args = {"summary": args_summary} if args_summary else {}
        self._emit(start)
        self._emit(
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": orjson.dumps(args).decode()}
        )
        self._emit({"type": "TOOL_CALL_END", "toolCallId": call_id})

    def _on_tool_started(self, t: events_pb2.ToolStarted) -> None:
        self._close_text()
        step = f"{t.tool}:{t.call_id}"
        self._steps.append(step)
        self._emit({"type": "STEP_STARTED", "stepName": step})
        if t.call_id not in self._announced:  # an approved call was announced with its card
            self._announce(t.call_id, t.tool, t.args_summary)

    def _on_tool_progress(self, p: events_pb2.ToolProgress) -> None:
        value: dict[str, Any] = {"toolCallId": p.call_id, "tool": p.tool, "fraction": p.fraction}
        if p.text:
            value["text"] = p.text
        self._emit({"type": "CUSTOM", "name": "tether.tool_progress", "value": value})

    def _on_tool_finished(self, f: events_pb2.ToolFinished) -> None:
        self._close_text()
        if f.call_id not in self._announced:
            self._announce(f.call_id, f.tool, "")
        self._emit(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"{f.call_id}:result",
                "toolCallId": f.call_id,
                "content": f.summary,
                "role": "tool",
            }
        )
        step = f"{f.tool}:{f.call_id}"
        if step in self._steps:
            self._steps.remove(step)
            self._emit({"type": "STEP_FINISHED", "stepName": step})

    def _on_graph_update(self, u: events_pb2.GraphUpdate) -> None:
        self._close_text()
        self._emit({"type": "STEP_STARTED", "stepName": u.node})
        self._emit({"type": "STEP_FINISHED", "stepName": u.node})

    def _on_custom_data(self, c: events_pb2.CustomData) -> None:
        value = orjson.loads(c.data_json or "null")
        if value is not None:
            self._emit({"type": "CUSTOM", "name": "tether.custom", "value": value})

    def _on_interrupt(self, i: events_pb2.InterruptRaised) -> None:
        """A card about a tool call the client has not seen yet (a write waiting for its
        approval, a question tool's call) streams that call first, with no result: AG-UI binds
        the interrupt to it by `toolCallId`; its TOOL_CALL_RESULT comes in the run that resumes."""
        if i.call_id and i.call_id not in self._announced:
            self._announce(
                i.call_id, i.payload.tool or i.payload.title, i.payload.parameter_summary
            )
        self._finish({"type": "interrupt", "interrupts": [interrupt_json(i)]}, snapshot=True)

    def _on_done(self, d: events_pb2.Done) -> None:
        result = orjson.loads(d.output_json) if d.output_json else None
        extra = {"result": result} if result is not None else {}
        self._finish({"type": "success"}, snapshot=True, **extra)

    def _on_cancelled(self, c: events_pb2.Cancelled) -> None:
        self._finish({"type": "cancelled"}, snapshot=False)

    def _on_error(self, e: events_pb2.Error) -> None:
        self._close_all()
        event: dict[str, Any] = {"type": "RUN_ERROR", "message": e.message or "the run failed"}
        if e.code:
            event["code"] = e.code
        self._emit(event)
