"""Stored answers for idempotency keys (AIP-155): the same key returns the first response."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether_runtime.store.db import Conn


@dataclass(frozen=True)
class StoredAnswer:
    request_hash: str
    response: dict[str, Any]


async def lookup(conn: Conn, scope: str, key: str) -> StoredAnswer | None:
    row = await conn.fetchrow(
        "SELECT request_hash, response FROM idempotency_key WHERE scope = $1 AND key = $2",
        scope,
        key,
    )
    return StoredAnswer(row["request_hash"], row["response"]) if row else None


async def store(
    conn: Conn, scope: str, key: str, request_hash: str, response: dict[str, Any]
) -> bool:
    """False when another request stored this key first (the caller's transaction should roll back)."""
    result = await conn.execute(
        "INSERT INTO idempotency_key (scope, key, request_hash, response) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT DO NOTHING",
        scope,
        key,
        request_hash,
        response,
    )
    return str(result).endswith(" 1")
