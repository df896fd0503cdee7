"""Preparing a database for Tether: migrations (Tether's, then every configured agent's) and the
demo data (`tether seed-demo`: each agent's `seed`, and the demo users' grants)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from tether_common.config import Settings
from tether_sdk import Agent, Host

from tether_runtime.engine.agents import discover
from tether_runtime.store import grants
from tether_runtime.store.db import connect
from tether_runtime.store.migrations import migrate, pending

# Least privilege, by service: alice looks after payment-api (the demo's walkthrough), bob after
# checkout-web, in every environment; each may read the logs of, restart and scale only their own
# service. Everyone else may list instances and nothing more.
DEMO_GRANTS = [
    (user, action, f"{service}/*")
    for user, service in (("alice", "payment-api"), ("bob", "checkout-web"))
    for action in ("logs.read", "instance.restart", "service.scale")
] + [
    # carol, the on-call lead, approves restarts anyone asks for, in every service and
    # environment (OpsPilot's restart_instance names approve:instance.restart as its approvers').
    ("carol", "approve:instance.restart", "*/*"),
]
# What the demo granted before its grants were scoped: withdrawn when the demo is seeded, so a
# database seeded by an older Tether does not keep alice and bob global.
OLD_DEMO_GRANTS = [
    (user, action, "*")
    for user in ("alice", "bob")
    for action in ("instance.restart", "service.scale")
]


Config = Settings | Mapping[str, str] | None


def configured_agents(config: Config = None) -> list[Agent]:
    """The agents `config` loads: Settings, or an environment to read them from (None: this
    process's)."""
    settings = config if isinstance(config, Settings) else Settings.from_env(config)
    return [agent for agent, _ in discover(settings)]


async def migrate_all(dsn: str, config: Config = None) -> list[str]:
    agents = configured_agents(config)
    return await migrate(dsn, [(a.name, a.migrations) for a in agents if a.migrations])


async def pending_all(dsn: str, config: Config = None) -> list[str]:
    """What `migrate_all` would apply (none: the schema is current for this code)."""
    agents = configured_agents(config)
    return await pending(dsn, [(a.name, a.migrations) for a in agents if a.migrations])


async def seed_demo(dsn: str, config: Config = None, *, reset: bool = False) -> None:
    """Idempotent: run it as often as you like. With `reset` (`tether seed-demo --reset`), each
    agent's `reset` puts its demo data back as first seeded (an agent without one is seeded
    again), and the demo grants are restored if someone revoked them."""
    settings = config if isinstance(config, Settings) else Settings.from_env(config)
    host = Host(database_url=dsn, transaction_pooler=settings.db_pooler != "none")
    for agent in configured_agents(settings):
        load = (agent.reset or agent.seed) if reset else agent.seed
        if load is None:
            continue
        if agent.lifespan is None:
            await load(None)
            continue
        async with agent.lifespan(host) as state:
            await load(state)
    conn = await connect(dsn)
    try:
        for user, action, scope in OLD_DEMO_GRANTS:
            await grants.revoke(conn, user, action, scope)
        for user, action, scope in DEMO_GRANTS:
            await grants.add(conn, user, action, scope)
    finally:
        await conn.close()


async def prepare(dsn: str, config: Config = None) -> list[str]:
    """Migrate and seed the demo: what `tether dev` and every test database start from."""
    applied = await migrate_all(dsn, config)
    await seed_demo(dsn, config)
    return applied


def prepare_sync(dsn: str) -> list[str]:
    return asyncio.run(prepare(dsn))
