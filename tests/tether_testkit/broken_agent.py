"""A deliberately broken agent for `tether conformance`: its write tool claims
`idempotent_by_key=True` but charges once per call whatever the key, so a kill during or after
the call, and the engine's call again with the same key, leaves two charges. `effects` counts the
charges per key (the probe conformance is given); conformance must fail on it and say why.

Load it with TETHER_AGENTS=tether_testkit.broken_agent:agent (tests/ on PYTHONPATH)."""

from __future__ import annotations

import asyncpg
from tether_sdk import Agent, ScriptedModel, ToolContext, tool

from tether_testkit.ledger_agent import ledger_pool


@tool(
    effect="write",
    action="account.charge",
    idempotent_by_key=True,  # a lie: the charge below ignores the key
    examples=[{"account": "acme", "cents": 500}],
)
async def charge(ctx: ToolContext, account: str, cents: int) -> str:
    """Charge an account."""
    async with ctx.state.acquire() as conn:
        await conn.execute(
            "INSERT INTO broken_charge (key, account, cents) VALUES ($1, $2, $3)",
            ctx.idempotency_key,
            account,
            cents,
        )
    return f"charged {account} {cents} cents"


async def effects(state: asyncpg.Pool, idempotency_key: str) -> int:
    """How many charges the "external system" holds for one key."""
    async with state.acquire() as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM broken_charge WHERE key = $1", idempotency_key
        )
    return int(n)


agent = Agent(
    name="broken",
    description="Test agent: a write tool that claims to honour the idempotency key and does not.",
    instructions="Charge what you are asked to charge.",
    model=ScriptedModel(lambda request: "I charge only when asked through a tool call."),
    tools=[charge],
    migrations="tether_testkit:broken_migrations",
    lifespan=ledger_pool,
)


@tool(effect="write", action="account.refund", idempotent_by_key=True)
async def refund(ctx: ToolContext, account: str, cents: int) -> str:
    """Refund an account (declares no examples, so conformance cannot drive it)."""
    return f"refunded {account} {cents} cents"


# A write tool without examples=[...]: reported "not checked", a failure unless allowed.
unexampled = Agent(
    name="unexampled",
    description="Test agent: a write tool conformance cannot drive.",
    instructions="Refund what you are asked to refund.",
    model=ScriptedModel(lambda request: "I refund only through a tool call."),
    tools=[refund],
)
