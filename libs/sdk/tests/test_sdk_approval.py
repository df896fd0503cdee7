"""A write tool's approval policy (tether_sdk.Approval): part of its declaration, resolved to the
grant an approver needs, and refused at load time when it cannot mean what it says."""

from __future__ import annotations

from typing import Any

import pytest
from tether_sdk import Agent, AgentDefinitionError, Approval, ScriptedModel, ToolContext, tool


def _agent(*tools: Any) -> Agent:
    return Agent("a", "d", "i", ScriptedModel(lambda request: "hello"), list(tools))


def test_no_policy_keeps_the_owner_deciding_and_an_empty_grant_is_the_tools_action() -> None:
    @tool(effect="write", action="instance.restart", idempotent_by_key=True)
    async def plain(ctx: ToolContext, target: str) -> str:
        """Plain."""
        return target

    @tool(
        effect="write",
        action="instance.restart",
        idempotent_by_key=True,
        approval=Approval(self_approval=False, approvals=2),
    )
    async def guarded(ctx: ToolContext, target: str) -> str:
        """Guarded."""
        return target

    assert plain.approval_policy is None
    assert guarded.approval_policy == Approval("instance.restart", False, 2)
    assert _agent(plain, guarded).problems() == []


@pytest.mark.parametrize(
    ("approval", "problem"),
    [
        (Approval(approvals=3), "approvals must be 1 or 2 (got 3)"),
        (Approval(approvals=0), "approvals must be 1 or 2 (got 0)"),
        (Approval(approvals=True), "approvals must be 1 or 2 (got True)"),
        (Approval(grant="Approve Restart"), "approval grant must look like"),
        (Approval(self_approval="no"), "self_approval must be True or False"),  # type: ignore[arg-type]
    ],
)
def test_a_policy_that_cannot_mean_what_it_says_is_refused(
    approval: Approval, problem: str
) -> None:
    @tool(effect="write", action="instance.restart", idempotent_by_key=True, approval=approval)
    async def bad(ctx: ToolContext, target: str) -> str:
        """Bad."""
        return target

    with pytest.raises(AgentDefinitionError) as info:
        _agent(bad).check()
    assert problem in str(info.value)


def test_only_a_write_tool_has_an_approval_policy() -> None:
    @tool(effect="read", approval=Approval())
    async def look(ctx: ToolContext, target: str) -> str:
        """Look."""
        return target

    with pytest.raises(AgentDefinitionError) as info:
        _agent(look).check()
    assert "only a write tool has an approval policy" in str(info.value)
