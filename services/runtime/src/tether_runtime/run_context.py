"""What a run's collaborators (its write calls, cards, tool calls, model steps, a driven agent's
host) may use of the run that executes them: narrow protocols, so that none of them depends on
the executor (run_loop.RunExecutor satisfies them all) and none imports it."""

from __future__ import annotations

from typing import Protocol

from tether_runtime import events as ev
from tether_runtime.run_writer import Apply, SaveCheckpoint


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

    def save(self) -> SaveCheckpoint:
        """The checkpoint as of now, to commit."""
        ...

    def time_left(self) -> float:
        """Seconds of the run's execution deadline left."""
        ...
