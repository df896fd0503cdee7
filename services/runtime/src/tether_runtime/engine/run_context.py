"""What a run's collaborators (its write calls, cards, tool calls, model steps, a driven agent's
host) may use of the run that executes them: narrow protocols, so that none of them depends on
the executor (run_loop.RunExecutor satisfies them all) and none imports it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from tether_common.run_bus import EventBus

from tether_runtime.domain import events as ev
from tether_runtime.domain.records import RunRow
from tether_runtime.engine.checkpoint import Checkpoint, PendingCall
from tether_runtime.engine.held_wakes import HeldWakes
from tether_runtime.engine.loaded_agent import LoadedAgent
from tether_runtime.policy.gate import ToolGate
from tether_runtime.store.db import Pool
from tether_runtime.streams.run_writer import Apply, SaveCheckpoint


class RunContext(Protocol):
    """The run's identity, its lease epoch and its one write path: enough to claim, finish and
    pause a call (write_call.py, cards.py)."""

    @property
    def run_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def interrupt_ttl_s(self) -> float: ...

    async def commit(self, events: list[ev.RunEvent], apply: Apply | None = None) -> None:
        """Events and the state they announce, durable on return, fenced by the epoch."""

    async def db_now(self) -> datetime:
        """Postgres's clock (store.db.DbClock): what a card's expiry is counted from, never this
        pod's own clock, which may differ from the other pods' by seconds."""
        ...

    def save(self, *, reset_streamed: bool = False) -> SaveCheckpoint:
        """The checkpoint as of now, to commit (`reset_streamed`: the text streamed so far will
        not be streamed again)."""
        ...

    def time_left(self) -> float:
        """Seconds of the run's execution deadline left."""
        ...


class RunHost(RunContext, Protocol):
    """Besides: the run's row, its agent, its checkpoint, the stores and the gate, and the events
    that carry no state (text, progress); what tool calls, model steps and a driven agent's host
    all use."""

    @property
    def run(self) -> RunRow: ...

    @property
    def loaded(self) -> LoadedAgent: ...

    @property
    def checkpoint(self) -> Checkpoint: ...

    @property
    def pool(self) -> Pool: ...

    @property
    def gate(self) -> ToolGate: ...

    @property
    def bus(self) -> EventBus: ...

    @property
    def coalesce_s(self) -> float:
        """How long streamed text may wait to be sent with more."""
        ...

    async def emit(self, events: list[ev.RunEvent], *, streamed: int = 0) -> None:
        """Events without state, queued behind every commit before them (`streamed`: the
        characters of text among them)."""

    async def stop_if_cancelled(self) -> None:
        """A cancel the run's writer heard of ends the run here (raises Finished)."""

    async def end_cancelled(self) -> None:
        """The run ends cancelled (raises Finished)."""


class ToolRun(RunHost, Protocol):
    """What the tool-call state machine (tool_calls.py) uses besides."""

    fresh_calls: set[str]
    """Calls this execution's own step made pending (no stored row can exist yet)."""

    @property
    def held(self) -> HeldWakes:
        """Where a call waiting for a person's answer is woken (held_questions.py)."""
        ...

    def record(self, call: PendingCall, body: dict[str, Any]) -> None:
        """Give the model a call's result and drop the call from the pending list."""

    def confirmed(self, facts: dict[str, Any]) -> None:
        """Facts a tool confirmed: the next step sees them."""

    async def rejoin(self) -> None:
        """After a question a tool asked during its call (held_questions.py): write on from
        where the log stands now (the answer was appended by another process); Fenced if the run
        is no longer this lease's."""


class StepRun(RunHost, Protocol):
    """What a model step (model_step.py) uses besides."""

    def count_usage(self, input_tokens: int, output_tokens: int) -> None:
        """Tokens a model step spent: on the checkpoint, and counted."""


class DrivenHost(RunHost, Protocol):
    """What the host of an agent that drives its own loop (driven.py) uses besides."""

    def send(self, events: list[ev.RunEvent], apply: Apply) -> None:
        """Events and the state change that records them, committed together without waiting:
        durable when the next commit returns, whose failure a failure of theirs becomes."""

    resume_skip: int
    """Text an earlier execution already streamed, to skip by length."""

    @property
    def cancel_requested(self) -> bool: ...

    @property
    def database_url(self) -> str: ...

    async def end(
        self,
        status: str,
        events: list[ev.RunEvent],
        *,
        answer: str | None = None,
        save: bool = False,
    ) -> None:
        """The run ends with `status` (raises Finished)."""
