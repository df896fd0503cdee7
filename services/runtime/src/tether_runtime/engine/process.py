"""What an executing run needs from its process: the stores, the settings, the tool gate and the
loaded agents. Built once per process by `server.run_server`."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether_common.config import Settings
from tether_common.run_bus import EventBus

from tether_runtime.engine.agent.summaries import Summaries
from tether_runtime.engine.agents import AgentRegistry
from tether_runtime.engine.held_wakes import HeldWakes
from tether_runtime.policy.gate import ToolGate
from tether_runtime.store.db import DbClock, Pool
from tether_runtime.store.run_admission import Admissions
from tether_runtime.streams.event_sink import EventSink


@dataclass
class Engine:
    pool: Pool
    bus: EventBus
    settings: Settings
    gate: ToolGate
    agents: AgentRegistry
    sink: EventSink = field(init=False)
    summaries: Summaries = field(init=False)
    """Background summaries of conversations (agent/summaries.py)."""
    held: HeldWakes = field(init=False)
    """The calls waiting for a person's answer (held_questions.py), woken by the worker's LISTEN."""
    admissions: Admissions = field(init=False)
    """StartRun's admissions without an idempotency key, batched (store/run_admission.py)."""
    clock: DbClock = field(init=False)
    """Postgres's clock, read once a minute: what a card's expiry is counted from."""

    def __post_init__(self) -> None:
        self.held = HeldWakes(self.settings.held_poll_s)
        self.sink = EventSink(self.pool, self.bus)
        self.admissions = Admissions(self.pool)
        self.summaries = Summaries(self.pool)
        self.clock = DbClock(self.pool)

    async def close(self) -> None:
        """Stop the engine's background work (before the pool closes)."""
        await self.summaries.close()
