"""A test agent on the public SDK whose write tools differ only in how they stay at-most-once:
`send_keyed` (the external system honours the key), `send_reconciled` (reconcile asks it what the
key did), `send_unkeyed` (neither: after a crash a person decides). Each call records itself in
`ledger_call` and its effect in `ledger_effect`; LEDGER_HOLD_S holds a call open around its effect
so a test can kill the runtime inside it.

Load it with TETHER_AGENTS=tether_testkit.ledger_agent:agent (tests/ on PYTHONPATH)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from tether_sdk import (
    Agent,
    Host,
    Limits,
    ModelRequest,
    Reconciled,
    ScriptedModel,
    ToolCall,
    ToolContext,
    TransientError,
    tool,
)

ACTION = "ledger.send"


@asynccontextmanager
async def ledger_pool(host: Host) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(host.database_url, min_size=1, max_size=4)
    try:
        yield pool
    finally:
        await pool.close()


async def _send(ctx: ToolContext, name: str, recipient: str) -> str:
    hold = float(os.environ.get("LEDGER_HOLD_S") or 0)
    async with ctx.state.acquire() as conn:
        await conn.execute(
            "INSERT INTO ledger_call (tool, key) VALUES ($1, $2)", name, ctx.idempotency_key
        )
    await ctx.progress(0.25, "asking the ledger")
    await asyncio.sleep(hold / 2)
    async with ctx.state.acquire() as conn:
        await conn.execute(
            "INSERT INTO ledger_effect (tool, key, recipient) VALUES ($1, $2, $3) "
            "ON CONFLICT DO NOTHING",
            name,
            ctx.idempotency_key,
            recipient,
        )
    await asyncio.sleep(hold / 2)
    return f"sent to {recipient}"


@tool(effect="write", action=ACTION, idempotent_by_key=True, examples=[{"recipient": "bob"}])
async def send_keyed(ctx: ToolContext, recipient: str) -> str:
    """Send a message; the ledger honours the idempotency key."""
    return await _send(ctx, "send_keyed", recipient)


@tool(effect="write", action=ACTION, examples=[{"recipient": "bob"}])
async def send_reconciled(ctx: ToolContext, recipient: str) -> str:
    """Send a message; after a crash, reconcile asks the ledger."""
    return await _send(ctx, "send_reconciled", recipient)


@send_reconciled.reconcile
async def _sent(ctx: ToolContext, recipient: str) -> Reconciled:
    from tether_sdk import ToolResult

    async with ctx.state.acquire() as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM ledger_effect WHERE key = $1", ctx.idempotency_key
        )
    return Reconciled.done(ToolResult(f"sent to {recipient}")) if n else Reconciled.not_done()


@tool(effect="write", action=ACTION, examples=[{"recipient": "bob"}])
async def send_unkeyed(ctx: ToolContext, recipient: str) -> str:
    """Send a message; nobody can tell afterwards whether it went out."""
    return await _send(ctx, "send_unkeyed", recipient)


@tool(effect="read")
async def peek(ctx: ToolContext, n: int = 0) -> str:
    """Look at the ledger (takes PEEK_S seconds)."""
    await asyncio.sleep(float(os.environ.get("PEEK_S") or 0))
    return f"peeked {n}"


@tool(effect="read")
async def flaky(ctx: ToolContext, fail_times: int) -> str:
    """Fails with a transient error on its first `fail_times` attempts."""
    async with ctx.state.acquire() as conn:
        await conn.execute(
            "INSERT INTO ledger_call (tool, key) VALUES ('flaky', $1)", ctx.idempotency_key
        )
    if ctx.attempt <= fail_times:
        raise TransientError(f"attempt {ctx.attempt}: the ledger is busy")
    return f"worked on attempt {ctx.attempt}"


def decide(req: ModelRequest) -> str | ToolCall:
    """ "<tool> to <recipient>": call the tool once, then say how it ended. "loop": peek
    forever (the step limit or the deadline ends it). "flaky N": a read tool failing N times."""
    words = req.last_user_text().split()
    results = req.results()
    if words[0] == "loop":
        return ToolCall("peek", {"n": len(results)})
    if words[0] == "flaky" and not results:
        return ToolCall("flaky", {"fail_times": int(words[1])})
    if results:
        r = results[-1]
        return f"{r.tool} ended: {r.outcome}: {r.summary}"
    return ToolCall(words[0], {"recipient": words[-1]})


agent = Agent(
    name="ledger",
    description="Test agent: three ways for a write tool to stay at-most-once.",
    instructions="Send what you are asked to send.",
    model=ScriptedModel(decide),
    tools=[send_keyed, send_reconciled, send_unkeyed, peek, flaky],
    limits=Limits(max_steps=5, tool_retries=2, retry_backoff_s=0.05),
    migrations="tether_testkit:ledger_migrations",
    lifespan=ledger_pool,
)

# The same tools under a short execution deadline (and a step limit it never reaches).
slowpoke = Agent(
    name="slowpoke",
    description="Test agent: a run that outlives its deadline.",
    instructions="Peek until stopped.",
    model=ScriptedModel(decide),
    tools=[peek],
    limits=Limits(max_steps=1000, run_deadline_s=1.0),
    lifespan=ledger_pool,
)
