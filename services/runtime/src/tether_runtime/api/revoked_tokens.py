"""The runtime's copy of the revoked token ids (tether_common.revocation): a token signed out on
any gateway pod is refused here too, for internal services that call gRPC directly with it.
The copy follows Redis's deny-list and its pub/sub channel; no Redis round trip per call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tether_common import redis_conn, task_stop
from tether_common.auth import TokenVerifier
from tether_common.revocation import Revocations


@contextlib.asynccontextmanager
async def follow_revocations(verifier: TokenVerifier, redis_url: str) -> AsyncIterator[None]:
    """While open, `verifier` refuses every token whose `jti` is revoked (none without Redis)."""
    if not redis_url:
        yield
        return
    revocations = Revocations()
    client = redis_conn.connect(redis_url, socket_connect_timeout=1.0, socket_timeout=2.0)
    verifier.is_revoked = lambda principal: revocations.is_revoked(principal.jti)
    task = asyncio.create_task(revocations.follow(lambda: client), name="revocation-follower")
    try:
        yield
    finally:
        await task_stop.stop(task)
        await client.aclose()
