"""The operator's API to a Tether database: what the `tether` command (cli/) does straight in
the database, as plain async functions of a DSN and typed arguments. Each opens its own short
connection (without a statement cache: safe through a transaction pooler) and closes it.

The CLI reaches the runtime's storage only through this module (cli/tests/test_cli_imports.py
holds it to that); the SQL stays in `tether_runtime.store`, the checks with it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

import asyncpg
from tether_sdk import Agent

from tether_runtime import provision
from tether_runtime.api import erasure
from tether_runtime.store import audit, grants, webhook_endpoints
from tether_runtime.store.audit import AuditRecord
from tether_runtime.store.db import connect, create_pool
from tether_runtime.store.erasure import Erased
from tether_runtime.store.grants import Grant, InvalidGrant
from tether_runtime.store.outbox import EVENT_TYPES as WEBHOOK_EVENTS
from tether_runtime.store.webhook_endpoints import Delivery, Endpoint, InvalidEndpoint

__all__ = [
    "AuditRecord",
    "Delivery",
    "Endpoint",
    "Erased",
    "Grant",
    "InvalidEndpoint",
    "InvalidGrant",
    "WEBHOOK_EVENTS",
    "add_endpoint",
    "add_grants",
    "audit_records",
    "check_endpoint",
    "check_grant",
    "configured_agents",
    "deliveries",
    "erase_user",
    "grant",
    "list_endpoints",
    "list_grants",
    "migrate",
    "pending_migrations",
    "redeliver_dead",
    "remove_endpoint",
    "revoke_grant",
    "seed_demo",
]

Config = provision.Config


@asynccontextmanager
async def _connection(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


# Schema and demo data (`tether migrate [--check]`, `tether seed-demo [--reset]`, `tether dev`).


def configured_agents(config: Config = None) -> list[Agent]:
    """The agents `config` loads (AgentLoadError when one cannot be)."""
    return provision.configured_agents(config)


async def migrate(dsn: str, config: Config = None) -> list[str]:
    """Tether's migrations, then every configured agent's: the ones applied now."""
    return await provision.migrate_all(dsn, config)


async def pending_migrations(dsn: str, config: Config = None) -> list[str]:
    """What `migrate` would apply (none: the schema is current for this code)."""
    return await provision.pending_all(dsn, config)


async def seed_demo(dsn: str, config: Config = None, *, reset: bool = False) -> None:
    """Each configured agent's demo data and the demo grants (idempotent)."""
    await provision.seed_demo(dsn, config, reset=reset)


# Grants (`tether grants add|revoke|list`).


def check_grant(user: str, action: str, scope: str) -> None:
    """Raise InvalidGrant, with a message a person can act on, for a grant no check could match
    as meant."""
    grants.check(user, action, scope)


async def grant(dsn: str, user: str, action: str, scope: str) -> bool:
    """True if the grant is new (granting twice is the same as once)."""
    [new] = await add_grants(dsn, [(user, action, scope)])
    return new


async def add_grants(dsn: str, wanted: Iterable[tuple[str, str, str]]) -> list[bool]:
    """Several (user, action, scope) grants on one connection; for each, whether it is new."""
    async with _connection(dsn) as conn:
        return [await grants.add(conn, user, action, scope) for user, action, scope in wanted]


async def revoke_grant(dsn: str, user: str, action: str, scope: str) -> bool:
    """True if exactly this grant existed (a narrower scope is not carved out of a wider one)."""
    async with _connection(dsn) as conn:
        return await grants.revoke(conn, user, action, scope)


async def list_grants(dsn: str, user: str | None = None) -> list[Grant]:
    """Every grant (of `user`, when given), by user, action and scope."""
    async with _connection(dsn) as conn:
        return await grants.list(conn, user)


# Webhook endpoints and their deliveries (`tether webhooks ...`).


def check_endpoint(url: str, events: list[str], secret: str) -> None:
    """Raise InvalidEndpoint, with a message a person can act on."""
    webhook_endpoints.check(url, events, secret)


async def add_endpoint(dsn: str, url: str, events: list[str], secret: str) -> str:
    """The new endpoint's id. The secret is stored, and no function here returns it."""
    async with _connection(dsn) as conn:
        return await webhook_endpoints.add(conn, url, events, secret)


async def list_endpoints(dsn: str) -> list[Endpoint]:
    """The endpoints, each with its pending, delivered and dead delivery counts."""
    async with _connection(dsn) as conn:
        return await webhook_endpoints.list(conn)


async def remove_endpoint(dsn: str, endpoint_id: str) -> bool:
    """True if the endpoint existed (its pending deliveries go with it)."""
    async with _connection(dsn) as conn:
        return await webhook_endpoints.remove(conn, endpoint_id)


async def redeliver_dead(dsn: str, endpoint_id: str) -> int:
    """How many of the endpoint's dead deliveries are due again, from now."""
    async with _connection(dsn) as conn:
        return await webhook_endpoints.redeliver_dead(conn, endpoint_id)


async def deliveries(
    dsn: str, *, endpoint_id: str | None = None, status: str | None = None, limit: int = 50
) -> list[Delivery]:
    """The newest deliveries first, optionally of one endpoint or in one status."""
    async with _connection(dsn) as conn:
        return await webhook_endpoints.deliveries(
            conn, endpoint_id=endpoint_id, status=status, limit=limit
        )


# The audit log (`tether audit export`).


async def audit_records(
    dsn: str,
    *,
    since: datetime | None,
    until: datetime | None = None,
    actor: str = "",
    page: int = 1000,
) -> AsyncIterator[Sequence[AuditRecord]]:
    """The records in [since, until) where `actor` acted or approved (any when empty), oldest
    first, in pages of at most `page` (read one page at a time, on one connection)."""
    async with _connection(dsn) as conn:
        await conn.set_type_codec(
            "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
        )
        after: tuple[datetime, str] | None = None
        while True:
            rows = await audit.list(
                conn, since=since, until=until, actor=actor, after=after, limit=page
            )
            if rows:
                yield rows
            if len(rows) < page:
                return
            after = (rows[-1].at, rows[-1].id)


# Erasure (`tether erase-user`).


async def erase_user(dsn: str, user: str, *, pooler: str = "none") -> Erased:
    """Everything of the user in one transaction, their audit records masked. RunActive (a
    TetherError), changing nothing, while a worker executes one of their runs."""
    pool = await create_pool(dsn, min_size=1, max_size=1, pooler=pooler)
    try:
        return await erasure.erase_user(pool, user)
    finally:
        await pool.close()
