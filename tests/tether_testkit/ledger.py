"""The ledger test agent's setup for whole-system tests: its environment and a database of a
test's own with the agent's tables (its migrations) and alice's grant to send."""

from __future__ import annotations

import os
from pathlib import Path

import asyncpg

from tether_testkit import stores

TESTS_DIR = str(Path(__file__).resolve().parents[1])
AGENT_ENV = {
    "TETHER_AGENTS": "tether_testkit.ledger_agent:agent",
    "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH", "")])),
}


async def create_ledger_database(admin_dsn: str) -> str:
    """A fresh, migrated (core + ledger) database; drop it with stores.drop_database."""
    from tether_runtime.provision import migrate_all
    from tether_runtime.store import grants

    dsn = await stores.create_fresh_database(admin_dsn)
    await migrate_all(dsn, {**os.environ, **AGENT_ENV})
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", "ledger.send", "*")
    finally:
        await conn.close()
    return dsn
