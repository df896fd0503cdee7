"""The one policy point: every grant check (at resume, before raising a confirmation, and again
at execution) asks here, so what "allowed" means is decided in one place. The one exception is
the read tool's, made by the statement that claims the call (streams/run_writer.py ClaimRead,
store/event_log.py ReadClaim): the same table read at that moment, matched by the store's one
matcher (store/grants.py `matches`, `matches_sql`)."""

from __future__ import annotations

from tether_runtime.store import grants
from tether_runtime.store.db import Conn


async def granted(conn: Conn, user_id: str, action: str, scope: str) -> bool:
    """Whether `user_id` may `action` on `scope` now: read from the store at every call, never
    cached, so a grant revoked while a run waits stops it."""
    return await grants.has_grant(conn, user_id, action, scope)
