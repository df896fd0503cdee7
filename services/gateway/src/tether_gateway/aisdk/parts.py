"""A Tether run's events as the AI SDK's UI message stream (v1) parts: one Tether run is one
assistant message (its id `msg-{run id}`), and each POST streams one stretch of it
(langgraph/stretches.py: from its start, or from a person's answer, to its next interrupt or its
end). The log is read from its first event so that what earlier stretches did is known.
Deterministic: every pod that reads the same log makes the same parts with the same SSE ids
(`{sequence}-{k}`: the k-th part made from the Tether event of that sequence, counting the
parts a view leaves out), so a reconnect with `Last-Event-ID` is exact whichever view (the
POST's stretch, or the whole run replayed by GET .../stream) the client read before.

Tether event -> part (README "AI SDK (useChat)" has the table):
  RunStarted (sequence 1) -> start {messageId} + start-step
  TextDelta -> text-start {id: Tether's message id} (once) + text-delta; after a tool's output,
    finish-step + start-step first (the model's next step)
  ToolStarted -> tool-input-start + tool-input-available {input: {summary: masked arguments}}
    (once per call: a call announced with its approval card is not announced again)
  ToolProgress -> data-tether-progress {id: call id}
  ToolFinished -> tool-output-available {output: summary}, or tool-output-error
  GraphUpdate -> data-tether-node; CustomData -> data-tether-custom
  InterruptRaised, a confirmation of a tool call -> (the call's tool-input-*) +
    tool-approval-request {approvalId: interrupt id, toolCallId}; any other ->
    data-tether-interrupt {id: interrupt id, data: the interrupt (agui/interrupts.py)}; then
    text-end, finish-step, finish, [DONE] (the stream of this stretch ends)
  InterruptResolved that begins a stretch -> start {same messageId} + tool-approval-response
    {approvalId, approved} (+ tool-output-denied for a rejection), or the data-tether-interrupt
    part again with `answer` (+ tool-output-available {answer} for a question tool's call)
  Done -> finish-step + finish + [DONE]; Cancelled -> abort + [DONE]; Error -> error + [DONE]"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_proto import wire

from tether_gateway.agui.interrupts import interrupt_json
from tether_gateway.langgraph import ids
from tether_gateway.langgraph.stretches import ending, starts_stretch

DONE = "[DONE]"
_CONFIRM = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
# Parts a view of the whole run leaves out where an earlier stretch ended at an interrupt.
_STRETCH_END = ("finish", DONE)


@dataclass(frozen=True)
class Part:
    cursor: ids.Cursor
    part: dict[str, Any] | str  # a part, or DONE

    @property
    def id(self) -> str:
        return ids.event_id(*self.cursor)

    def encode(self) -> bytes:
        data = self.part.encode() if isinstance(self.part, str) else orjson.dumps(self.part)
        return b"id: " + self.id.encode() + b"\ndata: " + data + b"\n\n"


def message_id(run_id: str) -> str:
    """The assistant message a Tether run is (the same on every pod and in every stretch)."""
    return f"msg-{run_id}"


class UiRun:
    """Feed a Tether run's events in order from sequence 1; `feed` returns the parts of the
    stretches from `first` on past `after`; `done` once stretch `last` (or a later one) ended.
    A stretch before `last` that ended at an interrupt keeps its parts but not its `finish` and
    `[DONE]` (the whole run replayed as one message)."""

    facts: dict[str, Any]

    def __init__(
        self, *, run_id: str, first: int, last: int, after: ids.Cursor = ids.START
    ) -> None:
        self.message_id = message_id(run_id)
        self.first = first
        self.last = last
        self.after = after
        self.facts = {}
        self.stretch = 0
        self.open = True
        self.done = False
        self._announced: set[str] = set()
        self._raised: dict[str, events_pb2.InterruptRaised] = {}
        self._denied: set[str] = set()  # rejected calls: their part ends at tool-output-denied
        self._text = ""
        self._step_done = False  # a tool's output went by: the next text is the model's next step
        self._out: list[Part] = []
        self._seq = 0
        self._k = 0

    def snapshot_due(self, ev: events_pb2.RunEvent) -> bool:
        return False  # the AI SDK's stream has no state snapshot

    def _emit(self, part: dict[str, Any] | str) -> None:
        cursor = (self._seq, self._k)
        self._k += 1
        if self.stretch < self.first or not self.open or cursor <= self.after:
            return
        skipped = self.stretch < self.last and (part if isinstance(part, str) else part["type"])
        if skipped in _STRETCH_END:
            return
        self._out.append(Part(cursor, part))

    def _begins(self, ev: events_pb2.RunEvent) -> bool:
        return ev.sequence == 1 or (starts_stretch(ev) and not self.open)

    def feed(self, ev: events_pb2.RunEvent) -> list[Part]:
        self._seq, self._k = ev.sequence, 0
        self._out = []
        if self._begins(ev):
            if ev.sequence != 1:
                self.stretch += 1
            self.open = True
            self._text = ""
            self._emit({"type": "start", "messageId": self.message_id})
            if ev.sequence == 1:
                self._emit({"type": "start-step"})
        kind = ev.WhichOneof("event")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(getattr(ev, str(kind)))
        if ending(ev) and self.open:
            if self.stretch >= self.last:
                self.done = True
            self.open = False
        return self._out

    # -- steps and the open text --

    def _close_text(self) -> None:
        if self._text:
            self._emit({"type": "text-end", "id": self._text})
            self._text = ""

    def _next_step(self) -> None:
        if self._step_done:
            self._step_done = False
            self._emit({"type": "finish-step"})
            self._emit({"type": "start-step"})

    def _finish(self, reason: str) -> None:
        self._close_text()
        self._emit({"type": "finish-step"})
        self._emit({"type": "finish", "finishReason": reason})
        self._emit(DONE)

    # -- Tether's events --

    def _on_text_delta(self, d: events_pb2.TextDelta) -> None:
        if not d.delta:
            return
        if self._text != d.message_id:
            self._close_text()
            self._next_step()
            self._text = d.message_id
            self._emit({"type": "text-start", "id": d.message_id})
        self._emit({"type": "text-delta", "id": d.message_id, "delta": d.delta})

    def _announce(self, call_id: str, tool: str, args_summary: str) -> None:
        self._close_text()
        self._next_step()
        self._announced.add(call_id)
        name = tool or "tool"
        self._emit({"type": "tool-input-start", "toolCallId": call_id, "toolName": name})
        args = {"summary": args_summary} if args_summary else {}
        self._emit(
            {"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": args}
        )

    def _on_tool_started(self, t: events_pb2.ToolStarted) -> None:
        if t.call_id not in self._announced:
            self._announce(t.call_id, t.tool, t.args_summary)

    def _on_tool_progress(self, p: events_pb2.ToolProgress) -> None:
        data: dict[str, Any] = {"toolCallId": p.call_id, "tool": p.tool, "fraction": p.fraction}
        if p.text:
            data["text"] = p.text
        self._emit({"type": "data-tether-progress", "id": p.call_id, "data": data})

    def _on_tool_finished(self, f: events_pb2.ToolFinished) -> None:
        if f.call_id in self._denied:
            return
        if f.call_id not in self._announced:
            self._announce(f.call_id, f.tool, "")
        self._close_text()
        if f.status == events_pb2.TOOL_STATUS_ERROR:
            text = f.summary or f"{f.tool} failed"
            self._emit({"type": "tool-output-error", "toolCallId": f.call_id, "errorText": text})
        else:
            self._emit(
                {"type": "tool-output-available", "toolCallId": f.call_id, "output": f.summary}
            )
        self._step_done = True

    def _on_graph_update(self, u: events_pb2.GraphUpdate) -> None:
        self._emit({"type": "data-tether-node", "data": {"node": u.node}})

    def _on_custom_data(self, c: events_pb2.CustomData) -> None:
        value = orjson.loads(c.data_json or "null")
        if value is not None:
            self._emit({"type": "data-tether-custom", "data": value})

    def _is_approval(self, i: events_pb2.InterruptRaised) -> bool:
        return i.kind == _CONFIRM and bool(i.call_id) and not i.payload.value_json

    def _on_interrupt(self, i: events_pb2.InterruptRaised) -> None:
        self._raised[i.interrupt_id] = i
        if i.call_id and i.call_id not in self._announced:
            self._announce(
                i.call_id, i.payload.tool or i.payload.title, i.payload.parameter_summary
            )
        self._close_text()
        if self._is_approval(i):
            self._emit(
                {
                    "type": "tool-approval-request",
                    "approvalId": i.interrupt_id,
                    "toolCallId": i.call_id,
                }
            )
        else:
            self._emit(
                {"type": "data-tether-interrupt", "id": i.interrupt_id, "data": interrupt_json(i)}
            )
        self._finish("tool-calls")

    def _on_interrupt_resolved(self, r: events_pb2.InterruptResolved) -> None:
        raised = self._raised.get(r.interrupt_id)
        if raised is None:
            return  # an answer that begins no stretch (an expiry) is dropped with its stretch
        if self._is_approval(raised):
            approved = r.decision == events_pb2.DECISION_APPROVED
            self._emit(
                {
                    "type": "tool-approval-response",
                    "approvalId": r.interrupt_id,
                    "approved": approved,
                }
            )
            if not approved:
                self._emit({"type": "tool-output-denied", "toolCallId": raised.call_id})
                self._denied.add(raised.call_id)
                self._step_done = True
        else:
            answer = wire.DECISION.name_of(r.decision)
            data = interrupt_json(raised) | {"answer": answer}
            self._emit({"type": "data-tether-interrupt", "id": r.interrupt_id, "data": data})
            if raised.call_id:
                # The question tool's call is answered: its part is complete (useChat's
                # automatic sends wait for every tool part of the step to be).
                output = {"answer": answer}
                self._emit(
                    {
                        "type": "tool-output-available",
                        "toolCallId": raised.call_id,
                        "output": output,
                    }
                )
                self._step_done = True

    def _on_done(self, d: events_pb2.Done) -> None:
        self._finish("stop")

    def _on_cancelled(self, c: events_pb2.Cancelled) -> None:
        self._close_text()
        self._emit({"type": "abort", "reason": c.reason} if c.reason else {"type": "abort"})
        self._emit(DONE)

    def _on_error(self, e: events_pb2.Error) -> None:
        self._close_text()
        self._emit({"type": "error", "errorText": e.message or "the run failed"})
        self._emit(DONE)
