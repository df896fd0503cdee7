"""The model interface. A model streams text increments and tool-call requests for one step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCallRequest:
    call_id: str
    name: str
    args: dict[str, Any]


@dataclass
class ModelInput:
    """The assembled context: system text (facts + summary) and the transcript (OpenAI-shaped
    dicts: role user/assistant/tool, content, tool_calls, tool_call_id, name)."""

    system: str
    messages: list[dict[str, Any]]
    tools: list[ToolSpec]
    facts: dict[str, Any] = field(default_factory=dict)


Chunk = str | ToolCallRequest


class Model(Protocol):
    def stream(self, request: ModelInput) -> AsyncIterator[Chunk]: ...
