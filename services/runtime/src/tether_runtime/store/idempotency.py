"""Stored answers for idempotency keys (AIP-155): the same key returns the first response, for
`ttl_s` (TETHER_IDEMPOTENCY_TTL_S, set once per process by `configure`). Past it a key is free:
reads ignore it, a new request with it replaces it, and `delete_expired` removes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether_runtime.store.db import Conn

DEFAULT_TTL_S = 7 * 86400.0
_ttl = {"s": DEFAULT_TTL_S}
CLEANUP_BATCH = 1000


def configure(ttl_s: float) -> None:
    _ttl["s"] = ttl_s


def ttl_s() -> float:
    return _ttl["s"]


@dataclass(frozen=True)
class StoredAnswer:
    request_hash: str
    response: dict[str, Any]


async def lookup(conn: Conn, scope: str, key: str) -> StoredAnswer | None:
    row = await conn.fetchrow(
        "SELECT request_hash, response FROM idempotency_key WHERE scope = $1 AND key = $2 "
        "AND created_at >= now() - make_interval(secs => $3)",
        scope,
        key,
        ttl_s(),
    )
    return StoredAnswer(row["request_hash"], row["response"]) if row else None


async def store(
    conn: Conn, scope: str, key: str, request_hash: str, response: dict[str, Any]
) -> bool:
    """False when another request stored this key first (the caller's transaction should roll back)."""
    result = await conn.execute(
        "INSERT INTO idempotency_key (scope, key, request_hash, response) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (scope, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, "
        "response = EXCLUDED.response, created_at = now() "
        "WHERE idempotency_key.created_at < now() - make_interval(secs => $5)",
        scope,
        key,
        request_hash,
        response,
        ttl_s(),
    )
    return str(result).endswith(" 1")


async def delete_expired(conn: Conn, batch: int = CLEANUP_BATCH) -> int:
    """Delete up to `batch` expired keys; any number of pods may run it at once (rows another
    pod is deleting are skipped, not waited for). Returns how many this call deleted."""
    result = await conn.execute(
        "DELETE FROM idempotency_key WHERE (scope, key) IN (SELECT scope, key FROM "
        "idempotency_key WHERE created_at < now() - make_interval(secs => $1) "
        "ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        ttl_s(),
        batch,
    )
    return int(str(result).rsplit(" ", 1)[-1])
