"""Tether's agent SDK: write an agent, its tools and their effects; Tether runs it durably.

    from tether_sdk import Agent, ScriptedModel, ToolContext, tool

    @tool(effect="read")
    async def lookup(ctx: ToolContext, order_id: str) -> str:
        "Find an order."
        ...

The public names are exactly those in `__all__` (a test pins them); everything in a module
whose name starts with an underscore may change without notice."""

from tether_sdk._agent import Agent, AgentDefinitionError, Host, Limits
from tether_sdk._approval import Approval
from tether_sdk._context import ToolContext
from tether_sdk._mcp import IDEMPOTENCY_META_KEY, MCPOverride, MCPServer
from tether_sdk._model import (
    Anthropic,
    Model,
    ModelError,
    ModelRequest,
    OpenAICompatible,
    Option,
    ProvideInput,
    ScriptedModel,
    SelectOption,
    ToolCall,
    ToolOutcome,
    ToolSchema,
    Usage,
)
from tether_sdk._results import Reconciled, ToolError, ToolResult, TransientError
from tether_sdk._tools import Confirmation, Effect, InvalidArguments, Risk, Tool, tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentDefinitionError",
    "Anthropic",
    "Approval",
    "Confirmation",
    "Effect",
    "Host",
    "IDEMPOTENCY_META_KEY",
    "InvalidArguments",
    "Limits",
    "MCPOverride",
    "MCPServer",
    "Model",
    "ModelError",
    "ModelRequest",
    "OpenAICompatible",
    "Option",
    "ProvideInput",
    "Reconciled",
    "Risk",
    "ScriptedModel",
    "SelectOption",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolOutcome",
    "ToolResult",
    "ToolSchema",
    "TransientError",
    "Usage",
    "tool",
]
