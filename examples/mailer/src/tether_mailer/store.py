"""The mailer's tables (migrations/): customers in segments, and per campaign the state of each
recipient. All of the mailer's SQL is here."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import asyncpg

STATUSES = ("pending", "sending", "sent", "failed")


@dataclass(frozen=True)
class Customer:
    email: str
    name: str


@dataclass(frozen=True)
class Delivery:
    """One recipient of one campaign."""

    position: int
    email: str
    name: str
    message_id: str
    status: str
    detail: str = ""


def message_id(key: str, email: str) -> str:
    """The same campaign key and recipient always give the same Message-ID, so any copy that
    ever reached a mailbox twice could be recognised as one message."""
    digest = hashlib.sha256(f"{key}\n{email.lower()}".encode()).hexdigest()[:40]
    return f"<{digest}@tether-mailer>"


async def segment_customers(conn: asyncpg.Connection, segment: str) -> list[Customer]:
    rows = await conn.fetch(
        "SELECT email, name FROM mail_customer WHERE segment = $1 ORDER BY id", segment
    )
    return [Customer(r["email"], r["name"]) for r in rows]


async def segment_sizes(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT segment, count(*) AS n FROM mail_customer GROUP BY segment ORDER BY segment"
    )
    return {r["segment"]: int(r["n"]) for r in rows}


async def start_campaign(
    pool: asyncpg.Pool, key: str, segment: str, subject: str, body: str
) -> list[Delivery]:
    """The campaign's recipients, fixed on its first call: a call made again after a crash
    works through the same list, whatever happened to the segment since."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", key)
        created = await conn.fetchval(
            "INSERT INTO mail_campaign (key, segment, subject, body) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT DO NOTHING RETURNING true",
            key,
            segment,
            subject,
            body,
        )
        if created:
            customers = await segment_customers(conn, segment)
            await conn.executemany(
                "INSERT INTO mail_delivery (campaign_key, position, email, name, message_id) "
                "VALUES ($1, $2, $3, $4, $5)",
                [
                    (key, i, c.email, c.name, message_id(key, c.email))
                    for i, c in enumerate(customers)
                ],
            )
        return await deliveries(conn, key)


async def deliveries(conn: asyncpg.Connection, key: str) -> list[Delivery]:
    rows = await conn.fetch(
        "SELECT position, email, name, message_id, status, detail FROM mail_delivery "
        "WHERE campaign_key = $1 ORDER BY position",
        key,
    )
    return [Delivery(**dict(r)) for r in rows]


async def mark(pool: asyncpg.Pool, key: str, email: str, status: str, detail: str = "") -> None:
    """Committed before the next step: `sending` must be durable before the message leaves."""
    assert status in STATUSES
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE mail_delivery SET status = $3, detail = $4, updated_at = now() "
            "WHERE campaign_key = $1 AND email = $2",
            key,
            email,
            status,
            detail,
        )
