"""A Tether run seen as LangGraph runs: LangGraph ends a run at an `interrupt()` (status
`success`) and the resume is a new run on the thread; Tether pauses one run and continues it.
Each stretch of a Tether run, from its start or from a person's answer to its next interrupt or
its end, is one LangGraph run (ids.stretch_run_id)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.runtime.v1 import events_pb2, resources_pb2

# An interrupt that expired or was cancelled is not answered: no new stretch (the run ends).
_UNANSWERED = frozenset({events_pb2.DECISION_EXPIRED, events_pb2.DECISION_CANCELLED})
_END_STATUS = {
    "interrupt": "success",
    "done": "success",
    "error": "error",
    "cancelled": "interrupted",
}
_OPEN_STATUS = {
    resources_pb2.RUN_STATUS_QUEUED: "pending",
    resources_pb2.RUN_STATUS_WAITING: "pending",
    resources_pb2.RUN_STATUS_RUNNING: "running",
    resources_pb2.RUN_STATUS_INTERRUPTED: "success",
    resources_pb2.RUN_STATUS_COMPLETED: "success",
    resources_pb2.RUN_STATUS_FAILED: "error",
    resources_pb2.RUN_STATUS_CANCELLED: "interrupted",
}


@dataclass(frozen=True)
class Stretch:
    index: int
    first: int  # the sequence it starts at: 1, or its InterruptResolved's
    last: int = 0  # the sequence of the event that ended it (an interrupt or the end); 0: open
    end: str = ""  # "interrupt", "done", "error", "cancelled"; "" while open

    def status(self, run: resources_pb2.Run) -> str:
        """LangGraph's run status: pending, running, success, error, interrupted."""
        if self.end:
            return _END_STATUS[self.end]
        return _OPEN_STATUS.get(run.status, "pending")


def starts_stretch(ev: events_pb2.RunEvent) -> bool:
    kind = ev.WhichOneof("event")
    return kind == "interrupt_resolved" and ev.interrupt_resolved.decision not in _UNANSWERED


def ending(ev: events_pb2.RunEvent) -> str:
    """The end a stretch takes at this event ("" when it goes on)."""
    kind = ev.WhichOneof("event")
    if kind in ("interrupt", "done", "error", "cancelled"):
        return str(kind)
    return ""


def stretches(events: Sequence[events_pb2.RunEvent]) -> list[Stretch]:
    """The stretches of a run's log (events from sequence 1); one open stretch for none."""
    out = [Stretch(0, 1)]
    for ev in events:
        current = out[-1]
        if starts_stretch(ev) and current.end == "interrupt":
            out.append(Stretch(current.index + 1, ev.sequence))
        elif not current.end and (end := ending(ev)):
            out[-1] = Stretch(current.index, current.first, ev.sequence, end)
    return out
