"""The SDK's public names are a contract: adding or removing one is a deliberate change to this
list (as the Temporal SDK pins its own), and each of them must be importable from the package."""

from __future__ import annotations

import importlib

import pytest
import tether_sdk

PUBLIC = [
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


def test_the_public_names_are_exactly_the_pinned_list() -> None:
    assert tether_sdk.__all__ == PUBLIC
    assert PUBLIC == sorted(PUBLIC)


def test_every_public_name_is_importable_and_none_is_private() -> None:
    module = importlib.import_module("tether_sdk")
    for name in PUBLIC:
        obj = getattr(module, name)
        assert obj is not None, name
        # A public name never lives only in a private spelling: `from tether_sdk import X` works.
        exec(f"from tether_sdk import {name}", {})
    assert not [n for n in PUBLIC if n.startswith("_")]


@pytest.mark.process  # starts a process: not in test-fast
def test_the_sdk_imports_nothing_of_the_engine() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tether_sdk\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tether_runtime', 'tether_gateway', 'tether_cli', 'tether_common', 'tether'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_it_has_a_version() -> None:
    assert tether_sdk.__version__.count(".") == 2
