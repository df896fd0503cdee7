"""A test agent whose write tools differ only in their approval policy (tether_sdk.Approval):
`send_peer` (one approver holding approve:ledger.send, never the requester) and `send_two` (two
distinct approvers, never the requester). Both use the ledger test agent's tables, so a test
counts real executions (`ledger_call`) and effects (`ledger_effect`).

Load it with TETHER_AGENTS=tether_testkit.approvals_agent:agent (tests/ on PYTHONPATH)."""

from __future__ import annotations

import os

import asyncpg
from tether_sdk import Agent, Approval, ScriptedModel, ToolContext, tool

from tether_testkit import stores
from tether_testkit.ledger import TESTS_DIR
from tether_testkit.ledger_agent import ACTION, _send, decide, ledger_pool

APPROVE = "approve:ledger.send"
AGENT_ENV = {
    "TETHER_AGENTS": "tether_testkit.approvals_agent:agent",
    "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH", "")])),
}


@tool(
    effect="write",
    action=ACTION,
    idempotent_by_key=True,
    approval=Approval(grant=APPROVE, self_approval=False),
)
async def send_peer(ctx: ToolContext, recipient: str) -> str:
    """Send a message once a colleague approved it."""
    return await _send(ctx, "send_peer", recipient)


@tool(
    effect="write",
    action=ACTION,
    idempotent_by_key=True,
    approval=Approval(grant=APPROVE, self_approval=False, approvals=2),
)
async def send_two(ctx: ToolContext, recipient: str) -> str:
    """Send a message once two colleagues approved it."""
    return await _send(ctx, "send_two", recipient)


agent = Agent(
    name="foureyes",
    description="Test agent: write tools under approval policies.",
    instructions="Send what you are asked to send.",
    model=ScriptedModel(decide),
    tools=[send_peer, send_two],
    migrations="tether_testkit:ledger_migrations",
    lifespan=ledger_pool,
)


async def create_database(admin_dsn: str, approvers: list[str]) -> str:
    """A fresh, migrated database (core + ledger tables): alice may send, `approvers` may
    approve sending; drop it with stores.drop_database."""
    from tether_runtime.provision import migrate_all
    from tether_runtime.store import grants

    dsn = await stores.create_fresh_database(admin_dsn)
    await migrate_all(dsn, {**os.environ, **AGENT_ENV})
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", ACTION, "*")
        for user in approvers:
            await grants.add(conn, user, APPROVE, "*")
    finally:
        await conn.close()
    return dsn
