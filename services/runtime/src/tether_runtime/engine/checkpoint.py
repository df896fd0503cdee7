"""A run's saved state between steps: the transcript the model sees, the tool calls still to
process, the text streamed so far, and the run's spent budget (steps, execution time). Stored as
JSON in `run.checkpoint`; a worker that takes a run over continues from exactly this."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tether_common import json_codec

VERSION = 2


@dataclass
class PendingCall:
    call_id: str
    tool: str
    args: dict[str, Any]
    interrupt_id: str = ""
    invalid: str = ""
    """Why the model's arguments could not be read (not JSON): the call is answered with an
    error for the model, and nothing runs."""


@dataclass
class Checkpoint:
    message_id: str
    """The id the run's answer streams under and is stored as."""
    messages: list[dict[str, Any]]
    pending: list[PendingCall] = field(default_factory=list)
    text: str = ""
    steps: int = 0
    """Model steps taken (Limits.max_steps)."""
    active_s: float = 0.0
    """Execution time spent by earlier workers, not counting waits for a person."""
    started: bool = True
    input_tokens: int = 0
    output_tokens: int = 0
    """Tokens the run's model steps used, retried attempts included (the run's `usage`)."""
    step_usage: list[list[int]] = field(default_factory=list)
    """[input, output] per model step, oldest first."""
    context_cut: bool = True
    """Older turns of the conversation fell out of the run's starting transcript: only then is
    a summary worth checking for when the run ends (unknown for older checkpoints: True)."""
    driver: dict[str, Any] = field(default_factory=dict)
    """What an agent that drives its own loop (a LangGraph graph, driven.py) keeps with the run:
    the tool calls it already announced, so each is announced once whatever is re-emitted."""
    output: str = ""
    """A graph agent's final state (LangGraph's `values`) as JSON text, once it completed:
    GetRun's `output_json` (kept when the checkpoint is compacted)."""

    def add_usage(self, input_tokens: int, output_tokens: int) -> None:
        """One model step's tokens."""
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.step_usage.append([input_tokens, output_tokens])

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> str:
        return json_codec.dumps(self._shallow())

    def as_dict(self) -> dict[str, Any]:
        return {"v": VERSION, **asdict(self)}

    def _shallow(self) -> dict[str, Any]:
        """The stored form without `asdict`'s deep copy of the transcript (encoded at once,
        so sharing its lists and dicts is safe); every save of a run pays for this."""
        out: dict[str, Any] = {"v": VERSION}
        for f in _FIELDS:
            out[f] = getattr(self, f)
        out["pending"] = [vars(p) for p in self.pending]
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Checkpoint | None:
        """None for a run queued by an older runtime that stored no started state."""
        if not raw.get("started"):
            return None
        return cls(
            message_id=str(raw["message_id"]),
            messages=list(raw.get("messages") or []),
            pending=[
                PendingCall(
                    str(p["call_id"]),
                    str(p["tool"]),
                    dict(p.get("args") or {}),
                    str(p.get("interrupt_id") or ""),
                    str(p.get("invalid") or ""),
                )
                for p in raw.get("pending") or []
            ],
            text=str(raw.get("text") or ""),
            steps=int(raw.get("steps") or 0),
            active_s=float(raw.get("active_s") or 0.0),
            input_tokens=int(raw.get("input_tokens") or 0),
            output_tokens=int(raw.get("output_tokens") or 0),
            step_usage=[[int(a), int(b)] for a, b in raw.get("step_usage") or []],
            context_cut=bool(raw.get("context_cut", True)),
            driver=dict(raw.get("driver") or {}),
            output=str(raw.get("output") or ""),
        )


def started(
    message_id: str, messages: list[dict[str, Any]], context_cut: bool = True
) -> dict[str, Any]:
    """The state a run's first step starts from: its context and the id its answer streams
    under."""
    return Checkpoint(message_id, messages, context_cut=context_cut).as_dict()


def pending(message_id: str) -> dict[str, Any]:
    """What StartRun stores with a run: the id its answer will stream under, and no context yet
    (not `started`). The worker builds the context from the turns its claim reads and saves it
    with the first step; a worker that takes the run over before then builds the same one (the
    turns before the run's message do not change while the run is the conversation's active
    one), under the same id. A runtime of an earlier release reads it as a run with no started
    state, builds it and stores it under an id of its own."""
    return {"v": VERSION, "message_id": message_id}


def pending_message_id(raw: dict[str, Any]) -> str:
    """The answer's id StartRun stored with a run whose context is still to be built ('' for a
    run stored `waiting`, or by an earlier release)."""
    return "" if raw.get("started") else str(raw.get("message_id") or "")


_FIELDS = tuple(f.name for f in fields(Checkpoint))
