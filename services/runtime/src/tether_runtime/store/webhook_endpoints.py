"""Webhook endpoints, as an operator manages them (`tether webhooks add|list|remove`), and the
state of their deliveries. An endpoint's secret is written here and read only to sign: no
function of this module returns it."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from tether_common.ids import new_id

from tether_runtime.store.db import Conn
from tether_runtime.store.outbox import EVENT_TYPES

MIN_SECRET_CHARS = 16
MAX_URL_CHARS = 2000


class InvalidEndpoint(ValueError):
    """A URL, event list or secret no delivery could use as meant."""


@dataclass(frozen=True)
class Endpoint:
    id: str
    url: str
    events: tuple[str, ...]
    enabled: bool
    created_at: datetime
    pending: int = 0
    delivered: int = 0
    dead: int = 0


@dataclass(frozen=True)
class Delivery:
    id: str
    event_id: str
    event_type: str
    endpoint_id: str
    run_id: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str
    created_at: datetime
    delivered_at: datetime | None


def check(url: str, events: builtins.list[str], secret: str) -> None:
    """Raise InvalidEndpoint with a message a person can act on."""
    parts = urlsplit(url)
    if len(url) > MAX_URL_CHARS or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidEndpoint(f"the URL must be http(s)://host/... (at most {MAX_URL_CHARS} chars)")
    if parts.username or parts.password:
        raise InvalidEndpoint("the URL must not carry credentials; the signature authenticates")
    if not events:
        raise InvalidEndpoint(f"name at least one event: {', '.join(EVENT_TYPES)}")
    unknown = sorted(set(events) - set(EVENT_TYPES))
    if unknown:
        raise InvalidEndpoint(
            f"unknown event(s) {', '.join(unknown)}; known: {', '.join(EVENT_TYPES)}"
        )
    if len(secret) < MIN_SECRET_CHARS or secret != secret.strip():
        raise InvalidEndpoint(
            f"the secret must be at least {MIN_SECRET_CHARS} characters, without surrounding "
            "whitespace (e.g. `openssl rand -hex 32`)"
        )


async def add(conn: Conn, url: str, events: builtins.list[str], secret: str) -> str:
    check(url, events, secret)
    endpoint_id = new_id("whe")
    await conn.execute(
        "INSERT INTO webhook_endpoint (id, url, events, secret) VALUES ($1, $2, $3, $4)",
        endpoint_id,
        url,
        sorted(set(events)),
        secret,
    )
    return endpoint_id


async def remove(conn: Conn, endpoint_id: str) -> bool:
    """True if it existed. Its deliveries (pending ones too) go with it."""
    result = await conn.execute("DELETE FROM webhook_endpoint WHERE id = $1", endpoint_id)
    return str(result).endswith(" 1")


async def list(conn: Conn) -> builtins.list[Endpoint]:
    rows = await conn.fetch(
        """
        SELECT ep.id, ep.url, ep.events, ep.enabled, ep.created_at,
               count(*) FILTER (WHERE d.status = 'pending') AS pending,
               count(*) FILTER (WHERE d.status = 'delivered') AS delivered,
               count(*) FILTER (WHERE d.status = 'dead') AS dead
        FROM webhook_endpoint ep LEFT JOIN webhook_delivery d ON d.endpoint_id = ep.id
        GROUP BY ep.id ORDER BY ep.id
        """
    )
    return [
        Endpoint(
            r["id"],
            r["url"],
            tuple(r["events"]),
            r["enabled"],
            r["created_at"],
            int(r["pending"]),
            int(r["delivered"]),
            int(r["dead"]),
        )
        for r in rows
    ]


async def deliveries(
    conn: Conn, *, endpoint_id: str | None = None, status: str | None = None, limit: int = 50
) -> builtins.list[Delivery]:
    """The newest deliveries first, optionally of one endpoint or in one status."""
    rows = await conn.fetch(
        "SELECT id, event_id, event_type, endpoint_id, run_id, status, attempts, next_attempt_at, "
        "last_status_code, last_error, created_at, delivered_at FROM webhook_delivery "
        "WHERE ($1::text IS NULL OR endpoint_id = $1) AND ($2::text IS NULL OR status = $2) "
        "ORDER BY created_at DESC, id DESC LIMIT $3",
        endpoint_id,
        status,
        limit,
    )
    return [Delivery(**dict(r)) for r in rows]


async def redeliver_dead(conn: Conn, endpoint_id: str) -> int:
    """Give an endpoint's dead deliveries a fresh set of attempts, due now (after the receiver
    was fixed). Returns how many."""
    result = await conn.execute(
        "UPDATE webhook_delivery SET status = 'pending', attempts = 0, next_attempt_at = now(), "
        "claim_token = NULL WHERE endpoint_id = $1 AND status = 'dead'",
        endpoint_id,
    )
    return int(str(result).rsplit(" ", 1)[-1])
