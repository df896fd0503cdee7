"""An agent that Tether cannot run safely is refused when it loads, with every reason at once."""

from __future__ import annotations

from typing import Any

import pytest
from sdk_testing import make_ctx
from tether_sdk import (
    Agent,
    AgentDefinitionError,
    Limits,
    Reconciled,
    ScriptedModel,
    ToolContext,
    tool,
)


def _model() -> ScriptedModel:
    return ScriptedModel(lambda request: "hello")


@tool(effect="read")
async def look(ctx: ToolContext, service: str) -> str:
    """Look."""
    return service


@tool(effect="write", action="service.poke", scope="{service}/{env}", idempotent_by_key=True)
async def poke(ctx: ToolContext, service: str, env: str = "prod") -> str:
    """Poke."""
    return service


def test_a_good_agent_checks_and_returns_itself() -> None:
    agent = Agent("good", "d", "i", _model(), [look, poke])
    assert agent.check() is agent
    assert agent.problems() == []
    assert agent.tool("poke") is poke and agent.tool("nope") is None


def test_a_tool_without_an_effect_is_told_the_difference_between_read_and_write() -> None:
    @tool
    async def guess(ctx: ToolContext, service: str) -> str:
        """Guess."""
        return service

    with pytest.raises(AgentDefinitionError) as info:
        Agent("a", "d", "i", _model(), [guess]).check()
    msg = str(info.value)
    assert "tool 'guess' declares no effect" in msg
    assert "effect='read'" in msg and "effect='write'" in msg
    assert "changes nothing" in msg and "needs a grant and a person's confirmation" in msg


def test_every_problem_is_listed_at_once() -> None:
    @tool(effect="write")
    async def no_action(ctx: ToolContext, service: str) -> str:
        """No action."""
        return ""

    @tool(effect="read", action="x.y", scope="{service}", idempotent_by_key=True)
    async def read_with_write_hooks(ctx: ToolContext, service: str) -> str:
        """Read that acts like a write."""
        return ""

    @read_with_write_hooks.reconcile
    async def _done(ctx: ToolContext, service: str) -> Reconciled:
        return Reconciled.unknown()

    @read_with_write_hooks.recheck
    async def _still(ctx: ToolContext, service: str) -> str | None:
        return None

    @read_with_write_hooks.confirmation
    async def _card(ctx: ToolContext, service: str) -> Any:
        return None

    def not_async(ctx: ToolContext, service: str) -> str:
        """Sync."""
        return ""

    sync_tool = tool(effect="read")(not_async)  # type: ignore[arg-type]

    @tool(effect="delete")  # type: ignore[arg-type]
    async def odd_effect(service: str) -> str:
        """Odd."""
        return ""

    @tool(effect="write", action="x.y", scope="{service}/{region}")
    async def bad_scope(service: str) -> str:
        """Bad scope."""
        return ""

    @tool(effect="read", name="look")
    async def look_again(service: str) -> str:
        """A second tool named look."""
        return ""

    @tool(effect="read", timeout_s=0, examples=[{"service": 1}])
    async def bad_limits(service: str) -> str:
        """Bad limits."""
        return ""

    agent = Agent(
        "Bad Name!",
        "d",
        "i",
        _model(),
        [
            look,
            look_again,
            no_action,
            read_with_write_hooks,
            sync_tool,
            odd_effect,
            bad_scope,
            bad_limits,
            not_async,  # type: ignore[list-item]
        ],
        limits=Limits(max_steps=0, tool_timeout_s=-1, tool_retries=-1),
        migrations="no-colon",
    )
    with pytest.raises(AgentDefinitionError) as info:
        agent.check()
    msg = str(info.value)
    assert msg.startswith("agent 'Bad Name!' cannot be loaded:\n")
    expected = [
        "agent name 'Bad Name!': 1-64 lowercase letters",
        "two tools are named 'look'",
        "write tool 'no_action' needs action='noun.verb'",
        "tool 'read_with_write_hooks' is effect='read' but declares "
        "idempotent_by_key, recheck, reconcile, confirmation, which only a write tool has",
        "tool 'not_async': must be an `async def` function",
        "tool 'odd_effect': effect must be 'read' or 'write', not 'delete'",
        "scope '{service}/{region}' names ['region'], which are not parameters",
        "tool 'bad_limits': timeout_s must be positive",
        "tool 'bad_limits': example 0 does not fit the schema: service: Input should be a valid "
        "string",
        "is not a tool; decorate it with @tool",
        "limits.max_steps must be at least 1",
        "limits.tool_timeout_s must be positive",
        "limits.tool_retries and limits.retry_backoff_s cannot be negative",
        "migrations must be 'package:folder', not 'no-colon'",
    ]
    for part in expected:
        assert part in msg, part
    # One line per problem, each a bullet.
    assert len(agent.problems()) == msg.count("\n  - ") == len(expected)


@pytest.mark.parametrize("name", ["", "OpsPilot", "1st", "a b", "x" * 65, "ops.pilot"])
def test_bad_agent_names(name: str) -> None:
    with pytest.raises(AgentDefinitionError, match="1-64 lowercase letters"):
        Agent(name, "d", "i", _model()).check()


@pytest.mark.parametrize("name", ["a", "opspilot", "my-agent_2", "x" * 64])
def test_good_agent_names(name: str) -> None:
    Agent(name, "d", "i", _model()).check()


def test_a_model_must_stream() -> None:
    with pytest.raises(AgentDefinitionError, match="model must have stream"):
        Agent("a", "d", "i", object()).check()  # type: ignore[arg-type]


def test_a_write_tool_with_neither_key_nor_reconcile_is_allowed_a_person_decides() -> None:
    @tool(effect="write", action="mail.send", scope="{to}")
    async def send(ctx: ToolContext, to: str) -> str:
        """Send."""
        return to

    assert send.problems() == []
    assert not send.idempotent_by_key and not send.can_reconcile


# -- scopes ------------------------------------------------------------------------------------


def test_a_scope_template_is_filled_from_the_arguments() -> None:
    assert poke.scope(poke.validate({"service": "payment-api"})) == "payment-api/prod"
    assert poke.scope({"service": "payment-api", "env": "staging"}) == "payment-api/staging"


def test_a_scope_may_be_a_function_of_the_arguments() -> None:
    @tool(
        effect="write",
        action="mail.send",
        scope=lambda args: "mail/" + args["to"].split("@")[1],
    )
    async def send(ctx: ToolContext, to: str) -> str:
        """Send."""
        return to

    assert send.problems() == []
    assert send.scope({"to": "bob@example.com"}) == "mail/example.com"


def test_an_undeclared_scope_is_star() -> None:
    @tool(effect="write", action="cache.flush")
    async def flush(ctx: ToolContext) -> str:
        """Flush."""
        return ""

    assert flush.scope({}) == "*"


async def test_the_default_card_shows_the_scope_and_the_arguments() -> None:
    card = await poke.confirmation_for(make_ctx(), poke.validate({"service": "payment-api"}))
    assert (card.title, card.target, card.summary, card.risk) == (
        "Poke.",
        "payment-api/prod",
        "env=prod, service=payment-api",
        "medium",
    )


async def test_hooks_get_the_context_and_validated_arguments() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    @tool(effect="write", action="x.y", scope="{n}")
    async def act(ctx: ToolContext, n: int, flag: bool = False) -> str:
        """Act."""
        return ""

    @act.recheck
    async def _recheck(ctx: ToolContext, n: int, flag: bool = False) -> str | None:
        seen.append(("recheck", {"n": n, "flag": flag, "key": ctx.idempotency_key}))
        return "healthy now" if n > 1 else None

    @act.reconcile
    async def _reconcile(ctx: ToolContext, n: int, flag: bool = False) -> Reconciled:
        seen.append(("reconcile", {"n": n, "flag": flag}))
        return Reconciled.not_done()

    assert act.problems() == []
    assert act.can_reconcile
    assert await act.recheck_for(make_ctx(), {"n": 1}) is None
    assert await act.recheck_for(make_ctx(), {"n": 2}) == "healthy now"
    assert (await act.reconcile_for(make_ctx(), {"n": 3})).status == "not_done"
    assert seen == [
        ("recheck", {"n": 1, "flag": False, "key": "run_1:call_1"}),
        ("recheck", {"n": 2, "flag": False, "key": "run_1:call_1"}),
        ("reconcile", {"n": 3, "flag": False}),
    ]
    assert (await poke.reconcile_for(make_ctx(), {"service": "a"})).status == "unknown"


def test_the_question_names_are_reserved() -> None:
    @tool(effect="read")
    async def select_option(ctx: ToolContext, value: str) -> str:
        """Would be taken for a question."""
        return value

    agent = Agent("picky", "d", "i", ScriptedModel(lambda request: "ok"), [select_option])
    with pytest.raises(AgentDefinitionError, match="may not be named 'select_option'"):
        agent.check()


# -- read tools with a grant -------------------------------------------------------------------


def test_a_read_tool_may_declare_an_action_and_a_scope() -> None:
    @tool(effect="read", action="logs.read", scope="{service}/{env}")
    async def logs(service: str, env: str = "prod") -> str:
        """Logs."""
        return service

    assert logs.problems() == [] and logs.warnings() == []
    assert logs.scope(logs.validate({"service": "payment-api"})) == "payment-api/prod"


def test_a_read_tool_without_an_action_loads_with_a_warning() -> None:
    @tool(effect="read")
    async def logs(service: str) -> str:
        """Logs."""
        return service

    assert logs.problems() == []
    (warning,) = logs.warnings()
    assert "declares no action, so every user may call it" in warning
    assert Agent("a", "d", "i", _model(), [logs]).warnings() == [warning]


@pytest.mark.parametrize(
    ("action", "scope", "problem"),
    [
        ("", "{service}", "declares a scope but no action"),
        ("logs", "{service}", "action must look like 'noun.verb'"),
        ("logs.read", "{service}/{region}", "names ['region'], which are not parameters"),
    ],
)
def test_a_read_tools_grant_must_be_checkable(action: str, scope: str, problem: str) -> None:
    @tool(effect="read", action=action, scope=scope)
    async def logs(service: str) -> str:
        """Logs."""
        return service

    (found,) = logs.problems()
    assert problem in found, found


def test_concurrent_runs_defaults_to_enqueue_and_takes_only_the_three_policies() -> None:
    assert Agent("a", "d", "i", _model()).concurrent_runs == "enqueue"
    for policy in ("reject", "enqueue", "interrupt"):
        Agent("a", "d", "i", _model(), concurrent_runs=policy).check()  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="concurrent_runs must be one of"):
        Agent("a", "d", "i", _model(), concurrent_runs="parallel").check()  # type: ignore[arg-type]
