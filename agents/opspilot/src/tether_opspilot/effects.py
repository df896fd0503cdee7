"""OpsPilot's effects probe for `tether conformance opspilot --effects
tether_opspilot.effects:count`: how many operations the inventory API holds for one idempotency
key (it records every restart, scale and delete in `inv_operation` under its key)."""

from __future__ import annotations

import asyncpg


async def count(state: asyncpg.Pool, idempotency_key: str) -> int:
    async with state.acquire() as conn:
        n = await conn.fetchval(
            "SELECT count(*) FROM inv_operation WHERE idempotency_key = $1", idempotency_key
        )
    return int(n)
