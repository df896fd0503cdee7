"""An agent as this process runs it: its definition, where it came from, the model driving it,
its state and what the engine derives from it once (agents.py loads them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether_sdk import Agent, Model, ScriptedModel


class AgentLoadError(Exception):
    """Configuration names an agent that cannot be loaded; the message says which and why."""


@dataclass
class LoadedAgent:
    agent: Agent
    source: str
    """Where it came from: "TETHER_AGENTS=mod:attr" or "entry point name = mod:attr"."""
    model: Model
    state: Any = None
    cache: dict[str, Any] = field(default_factory=dict)
    """What the engine derives from the agent once per process (its context budget)."""

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def provider(self) -> tuple[str, str]:
        """(provider, model name) of the model driving the agent, for metrics, logs and token
        counting; never a key. Providers name themselves; a ScriptedModel is "scripted"."""
        model = self.model
        provider = getattr(model, "provider", None)
        if provider is None:
            provider = "scripted" if isinstance(model, ScriptedModel) else "custom"
        return str(provider), str(getattr(model, "model", "") or type(model).__name__)
