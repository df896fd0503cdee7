"""OpsPilot, defined on the public SDK: its instructions, model, tools, limits, tables and demo
data. Tether finds it through the `tether.agents` entry point (or TETHER_AGENTS)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from tether_sdk import Agent, Host, Limits, ScriptedModel

from tether_opspilot import policy, tools
from tether_opspilot.seed import reset_inventory, seed_inventory


async def _json_codecs(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _no_reset(conn: asyncpg.Connection) -> None:
    """The inventory's statements leave no session state behind (their advisory locks are
    transaction-scoped, nothing LISTENs or SETs), so asyncpg's reset query on each release
    (advisory unlock, CLOSE ALL, UNLISTEN, RESET ALL) would be a round trip per tool call for
    nothing."""


@asynccontextmanager
async def inventory_pool(host: Host) -> AsyncIterator[asyncpg.Pool]:
    """The inventory API's own connections: its tables live in OPSPILOT_DATABASE_URL, by default
    Tether's database, where `tether migrate` created them from this agent's migrations."""
    own = os.environ.get("OPSPILOT_DATABASE_URL")
    dsn = own or host.database_url
    # Behind a transaction pooler a cached (named) statement may be missing on the next server
    # connection: prepare each one unnamed instead.
    cache: dict[str, int] = (
        {} if own or not host.transaction_pooler else {"statement_cache_size": 0}
    )
    # Every statement bounded (asyncpg waits forever by default): on a connection gone dark (a
    # NAT forgot it, a link was cut: no FIN, no RST) a statement fails after 5 s, and asyncpg's
    # cancel of it, bounded the same, ends the connection; unbounded, the tool hung until its
    # timeout and past it (tests/integration/chaos/test_chaos_links.py, half-open Postgres).
    pool = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=10,
        init=_json_codecs,
        reset=_no_reset,
        command_timeout=5,
        **cache,
    )
    try:
        yield pool
    finally:
        await pool.close()


agent = Agent(
    name="opspilot",
    description="An ops assistant: finds instances, errors and logs; restarts and scales with approval.",
    instructions=(
        "You are OpsPilot, an operations assistant. Look things up before acting. Restarting an "
        "instance or scaling a service changes production: propose it with the tool, and a "
        "person approves it. Use the recent turns to understand what 'it' refers to."
    ),
    model=ScriptedModel(policy.decide),
    tools=[
        tools.find_instances,
        tools.recent_errors,
        tools.get_logs,
        tools.restart_instance,
        tools.scale_service,
        tools.delete_instance,
    ],
    limits=Limits(max_steps=12, run_deadline_s=600, tool_timeout_s=30),
    migrations="tether_opspilot:migrations",
    lifespan=inventory_pool,
    seed=seed_inventory,
    reset=reset_inventory,
)
