"""Issue 31's mapping, without processes: an MCP tool's annotations -> its effect, risk, grant and
what happens after a crash (engine/mcp/effects.py), the agent's and the operator's overrides over
them, the names the model sees, arguments checked against inputSchema, results and errors as the
model sees them, and the SDK's refusal of a bad server declaration."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
import pytest
from tether_runtime.engine.loaded_agent import AgentLoadError
from tether_runtime.engine.mcp.effects import derive, model_name
from tether_runtime.engine.mcp.hub import load_overrides
from tether_runtime.engine.mcp.sessions import Connection, Unavailable, headers_for
from tether_runtime.engine.mcp.tools import MCPTool
from tether_sdk import (
    Agent,
    AgentDefinitionError,
    Approval,
    InvalidArguments,
    MCPOverride,
    MCPServer,
    ScriptedModel,
    ToolError,
)

GIT = MCPServer.stdio("git", command=["mcp-server-git"])


@pytest.mark.parametrize(
    ("annotations", "effect", "idempotent", "risk", "after"),
    [
        ({"readOnlyHint": True}, "read", False, "high", "called again"),
        ({"readOnlyHint": True, "idempotentHint": True}, "read", False, "high", "called again"),
        (
            {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False},
            "write",
            True,
            "medium",
            "called again with the same key",
        ),
        (
            {"readOnlyHint": False, "destructiveHint": True},
            "write",
            False,
            "high",
            "outcome_unknown",
        ),
        ({"idempotentHint": True}, "write", True, "high", "called again with the same key"),
        ({"title": "Send"}, "write", False, "high", "outcome_unknown"),
        (None, "write", False, "high", "outcome_unknown"),
        ({"readOnlyHint": "yes"}, "write", False, "high", "outcome_unknown"),  # not a boolean
    ],
)
def test_annotations_to_effect(
    annotations: dict[str, Any] | None, effect: str, idempotent: bool, risk: str, after: str
) -> None:
    d = derive(GIT, "t", annotations)
    assert (d.effect, d.idempotent, d.after_crash) == (effect, idempotent, after)
    if effect == "write":
        assert d.risk == risk
        # A write needs a grant: the server's action, on the tool's name.
        assert (d.action, d.scope) == ("mcp.git", "t")
    else:
        assert d.action == "" and d.scope is None  # a read is open unless overridden


def test_where_each_value_came_from() -> None:
    assert derive(GIT, "t", None).why["effect"] == "no annotations: a write"
    assert derive(GIT, "t", {"title": "x"}).why["effect"] == "no readOnlyHint: a write"
    assert derive(GIT, "t", {"readOnlyHint": True}).why["effect"] == "readOnlyHint: true"


def test_overrides_win_the_operator_last() -> None:
    agent = MCPOverride(
        effect="write",
        action="repo.write",
        scope="{repo_path}",
        risk="low",
        idempotent=True,
        approval=Approval(approvals=2),
        timeout_s=5,
    )
    d = derive(GIT, "git_status", {"readOnlyHint": True}, agent)
    assert (d.effect, d.action, d.scope, d.risk, d.idempotent, d.timeout_s) == (
        "write",
        "repo.write",
        "{repo_path}",
        "low",
        True,
        5,
    )
    assert d.approval == Approval(approvals=2)
    assert d.why["effect"] == "override"
    operator = MCPOverride(effect="read", action="repo.read", deny=False)
    d = derive(GIT, "git_status", {"readOnlyHint": False}, agent, operator)
    assert (d.effect, d.action, d.idempotent, d.approval) == ("read", "repo.read", False, None)
    assert d.why["effect"] == "operator override"
    # Deny from either side holds.
    assert derive(GIT, "t", None, MCPOverride(deny=True), MCPOverride()).deny
    assert derive(GIT, "t", None, None, MCPOverride(deny=True)).deny
    # A read given an action gets the tool's name as its scope unless a template is given.
    d = derive(GIT, "git_log", {"readOnlyHint": True}, MCPOverride(action="repo.read"))
    assert (d.effect, d.action, d.scope) == ("read", "repo.read", "git_log")


def test_model_names_fit_every_provider() -> None:
    assert model_name("git", "git_status") == "git__git_status"
    assert model_name("fs", "read.file/v2") == "fs__read_file_v2"
    long = model_name("srv", "x" * 100)
    assert len(long) == 64 and long != model_name("srv", "x" * 99)


def _tool(schema: dict[str, Any], annotations: dict[str, Any] | None = None, **kw: Any) -> MCPTool:
    listed = mcp_types.Tool.model_validate(
        {
            "name": "send",
            "description": "Send a message.\nMore.",
            "inputSchema": schema,
            **({"annotations": annotations} if annotations is not None else {}),
            **kw,
        }
    )
    return MCPTool(GIT, listed, derive(GIT, "send", annotations), Connection(GIT))


SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "n": {"type": "integer", "minimum": 1}},
    "required": ["to"],
    "additionalProperties": False,
}


def test_arguments_checked_against_the_input_schema() -> None:
    t = _tool(SCHEMA)
    assert t.name == "git__send" and t.effect == "write" and t.problems() == []
    assert t.validate({"to": "bob", "n": 2}) == {"to": "bob", "n": 2}
    for bad, where in (
        ({"n": 2}, "'to' is a required property"),
        ({"to": 3}, "to: 3 is not of type 'string'"),
        ({"to": "x", "n": 0}, "n: 0 is less than the minimum of 1"),
        ({"to": "x", "extra": 1}, "Additional properties are not allowed"),
    ):
        with pytest.raises(InvalidArguments) as err:
            t.validate(bad)
        assert where in err.value.message
    assert t.schema().parameters == SCHEMA


def test_a_tool_whose_schema_is_not_an_object_cannot_be_called() -> None:
    t = _tool({"type": "string"})
    assert t.problems() and "inputSchema" in t.problems()[0]
    with pytest.raises(InvalidArguments):
        t.validate({})


async def test_results_and_errors_as_the_model_sees_them() -> None:
    t = _tool(SCHEMA, {"readOnlyHint": True})
    ok = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="line one\nline two"),
            mcp_types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
        ],
        structured_content={"count": 2},
    )
    r = t.result_of(ok)
    assert r.summary == "line one"
    assert r.data["text"] == "line one\nline two"
    assert r.data["structured"] == {"count": 2}
    assert r.data["content"] == [{"type": "image", "mimeType": "image/png", "base64_chars": 8}]
    err = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="no such repo")], is_error=True
    )
    with pytest.raises(ToolError) as raised:
        t.result_of(err)
    assert raised.value.message == "no such repo"


async def test_the_card_from_title_description_and_arguments() -> None:
    t = _tool(SCHEMA, None, title="Send it")
    card = await t.confirmation_for(None, {"to": "bob"})  # type: ignore[arg-type]
    assert (card.title, card.target, card.summary, card.risk) == (
        "Send it",
        "send",
        "to=bob",
        "high",
    )
    assert "MCP server 'git', tool 'send'" in card.details
    untitled = _tool(SCHEMA)
    card = await untitled.confirmation_for(None, {"to": "bob"})  # type: ignore[arg-type]
    assert card.title == "Send a message."


def test_headers_from_the_environment_and_a_secret_file(tmp_path) -> None:
    secret = tmp_path / "headers"
    secret.write_text("# mounted\nX-Api-Key: k-123\n")
    server = MCPServer.http(
        "x",
        "https://mcp.example/mcp",
        headers={"X-Team": "ops"},
        headers_from_env={"Authorization": "TOKEN_VAR"},
        headers_file=str(secret),
    )
    assert headers_for(server, {"TOKEN_VAR": "Bearer t"}) == {
        "X-Team": "ops",
        "Authorization": "Bearer t",
        "X-Api-Key": "k-123",
    }
    with pytest.raises(Unavailable) as err:
        headers_for(server, {})
    assert "TOKEN_VAR" in str(err.value) and "Bearer" not in str(err.value)


def test_a_bad_server_declaration_is_refused_with_every_reason() -> None:
    agent = Agent(
        name="a",
        description="",
        instructions="",
        model=ScriptedModel(lambda req: "hi"),
        mcp_servers=[
            MCPServer.stdio("Git_Server", command=[]),
            MCPServer.http("web", url="ftp://x", tools={"t": MCPOverride(effect="delete")}),  # type: ignore[arg-type]
            MCPServer.http("web", url="https://x", tools={"t": MCPOverride(action="Bad")}),
        ],
    )
    with pytest.raises(AgentDefinitionError) as err:
        agent.check()
    text = str(err.value)
    for expected in (
        "a name is 1-24 lowercase letters",
        "stdio needs command",
        "http needs url",
        "effect must be 'read' or 'write'",
        "two MCP servers are named 'web'",
        "action must look like 'noun.verb'",
    ):
        assert expected in text, text


def test_an_operator_overrides_file(tmp_path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "gitops": {
                    "git": {
                        "git_commit": {"approval": {"approvals": 2}, "risk": "high"},
                        "git_reset": {"deny": True},
                    }
                }
            }
        )
    )
    found = load_overrides(str(path))
    assert found["gitops"]["git"]["git_reset"].deny
    assert found["gitops"]["git"]["git_commit"].approval == Approval(approvals=2)
    path.write_text(json.dumps({"gitops": {"git": {"git_commit": {"effect": "maybe"}}}}))
    with pytest.raises(AgentLoadError) as err:
        load_overrides(str(path))
    assert "effect must be 'read' or 'write'" in str(err.value)
    path.write_text(json.dumps({"gitops": {"git": {"git_commit": {"colour": "red"}}}}))
    with pytest.raises(AgentLoadError):
        load_overrides(str(path))


@pytest.mark.parametrize(
    ("schema", "examples"),
    [
        # The schema's own whole examples win.
        ({**SCHEMA, "examples": [{"to": "a", "n": 2}]}, [{"to": "a", "n": 2}]),
        # Else one set from each property's example or default, when every required one has one.
        (
            {
                "type": "object",
                "properties": {
                    "to": {"type": "string", "examples": ["bob", "carol"]},
                    "n": {"type": "integer", "default": 3},
                },
                "required": ["to"],
            },
            [{"to": "bob", "n": 3}],
        ),
        ({**SCHEMA, "required": ["to"]}, []),  # `to` has none: nothing usable
        ({"type": "object", "properties": {}}, [{}]),  # no arguments: calling it is the example
        # A misfit of the server's is dropped, not offered.
        ({**SCHEMA, "examples": [{"to": "a", "n": 0}]}, []),
    ],
)
def test_conformance_examples_come_from_the_input_schema(
    schema: dict[str, Any], examples: list[dict[str, Any]]
) -> None:
    tool = _tool(schema, {"readOnlyHint": False})
    assert tool.examples == examples
    assert tool.examples_from == ("inputSchema" if examples else "")


def test_an_overrides_examples_win_and_a_misfit_is_the_agents_problem() -> None:
    listed = mcp_types.Tool.model_validate(
        {"name": "send", "inputSchema": {**SCHEMA, "examples": [{"to": "a"}]}}
    )
    good = MCPOverride(examples=[{"to": "z", "n": 1}])
    tool = MCPTool(GIT, listed, derive(GIT, "send", None, good), Connection(GIT))
    assert tool.examples == [{"to": "z", "n": 1}] and tool.examples_from == "override"
    assert tool.problems() == []
    bad = MCPOverride(examples=[{"n": "x"}])
    tool = MCPTool(GIT, listed, derive(GIT, "send", None, bad), Connection(GIT))
    assert any("example 0 does not fit the schema" in p for p in tool.problems())
    assert MCPOverride(examples="nope").problems("here") == [  # type: ignore[arg-type]
        "here: examples must be a list of argument objects"
    ]
