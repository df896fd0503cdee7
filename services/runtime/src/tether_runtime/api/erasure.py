"""DeleteConversation (the owner's) and `tether erase-user` (an operator's): everything of the
conversations gone from every table, the audit records kept with their content masked
(store/erasure.py). A conversation with a run a worker is executing is refused (RUN_ACTIVE,
naming it): cancel the run, then delete."""

from __future__ import annotations

import logging

from tether_common.auth import Principal
from tether_common.errors import InvalidArgument, NotFound, PermissionDenied, RunActive

from tether_runtime.store import conversations, db
from tether_runtime.store import erasure as store
from tether_runtime.store.db import Conn, Pool

log = logging.getLogger(__name__)


def _refused(err: store.RunStillRunning) -> RunActive:
    return RunActive(
        f"run {err.run_id} of this conversation is running: cancel it, then delete",
        active_run_id=err.run_id,
    )


async def delete_conversation(pool: Pool, principal: Principal, conv_id: str) -> store.Erased:
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")

    async def delete(conn: Conn) -> store.Erased:
        conv = await conversations.get(conn, conv_id)
        if conv is None or conv.user_id != principal.user_id:
            raise NotFound("conversation not found", reason="CONVERSATION_NOT_FOUND")
        # The conversation row first: a StartRun in it waits (run_admission.py locks it too).
        await conn.execute("SELECT 1 FROM conversation WHERE id = $1 FOR UPDATE", conv_id)
        try:
            return await store.erase(conn, [conv_id])
        except store.RunStillRunning as err:
            raise _refused(err) from None

    # A worker or a decision locks a run, then its conversation; the erasure locks them the
    # other way round: Postgres aborts one of them (deadlock), and the erasure starts again.
    erased = await db.retrying(pool, delete)
    log.info(
        "conversation deleted",
        extra={"conversation_id": conv_id, "runs": len(erased.runs), "rows": erased.rows},
    )
    return erased


async def erase_user(pool: Pool, user_id: str) -> store.Erased:
    """Every conversation of the user, every row naming them, their audit records masked."""
    if not user_id.strip() or len(user_id) > 200:
        raise InvalidArgument("the user id must be 1-200 characters")

    async def erase(conn: Conn) -> store.Erased:
        await conn.execute(
            "SELECT 1 FROM conversation WHERE user_id = $1 ORDER BY id FOR UPDATE", user_id
        )
        convs = await store.user_conversations(conn, user_id)
        try:
            return await store.erase(conn, convs, user_id)
        except store.RunStillRunning as err:
            raise _refused(err) from None

    return await db.retrying(pool, erase)
