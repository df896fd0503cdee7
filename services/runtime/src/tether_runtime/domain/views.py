"""RunView: the answer shape of run-returning calls, JSON-serializable so an idempotent replay
returns exactly the first answer. AgentView: a loaded agent as ListAgents shows it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tether_runtime.domain.records import InterruptRow, RunRow


@dataclass(frozen=True)
class InterruptView:
    id: str
    run_id: str
    kind: str
    status: str
    payload: dict[str, Any]
    expires_at: str
    resolved_at: str | None
    resolved_by: str | None
    decision: str | None

    @classmethod
    def of(cls, i: InterruptRow) -> InterruptView:
        return cls(
            i.id,
            i.run_id,
            i.kind,
            i.status,
            i.payload,
            i.expires_at.isoformat(),
            i.resolved_at.isoformat() if i.resolved_at else None,
            i.resolved_by,
            i.decision,
        )


@dataclass(frozen=True)
class RunView:
    id: str
    conversation_id: str
    user_id: str
    user_message_id: str
    agent: str
    status: str
    last_sequence: int
    cancel_requested: bool
    created_at: str
    updated_at: str
    pending_interrupt: InterruptView | None
    input_tokens: int = 0
    output_tokens: int = 0
    model_steps: int = 0
    events_expired: bool = False
    """Retention dropped the run's events (store/event_partitions.py)."""
    output_json: str = ""
    """A completed graph run's final state as JSON text (its checkpoint's `output`)."""

    @classmethod
    def of(cls, r: RunRow, pending: InterruptRow | None = None) -> RunView:
        cp = r.checkpoint or {}
        return cls(
            r.id,
            r.conversation_id,
            r.user_id,
            r.user_message_id,
            r.agent,
            r.status,
            r.last_sequence,
            r.cancel_requested,
            r.created_at.isoformat(),
            r.updated_at.isoformat(),
            InterruptView.of(pending) if pending else None,
            int(cp.get("input_tokens") or 0),
            int(cp.get("output_tokens") or 0),
            int(cp.get("steps") or 0),
            output_json=str(cp.get("output") or ""),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> RunView:
        p = v.get("pending_interrupt")
        return cls(**{**v, "pending_interrupt": InterruptView(**p) if p else None})


@dataclass(frozen=True)
class AgentToolView:
    name: str
    description: str
    effect: str  # "read" or "write"
    action: str  # the grant the tool needs; "" for a read tool any user may call
    risk: str  # "low", "medium" or "high" for a write tool; "" for a read tool
    origin: str = ""  # an MCP tool's: its server, and what set its effect; "" for a native one


@dataclass(frozen=True)
class AgentView:
    name: str
    description: str
    tools: tuple[AgentToolView, ...]
    kind: str = "native"
    """"native" (Tether's own loop) or "graph" (an agent that drives its own, a LangGraph graph)."""
    input_schema_json: str = ""
    output_schema_json: str = ""
    state_schema_json: str = ""
    """A graph agent's JSON Schemas (JSON text); empty for a native agent."""
