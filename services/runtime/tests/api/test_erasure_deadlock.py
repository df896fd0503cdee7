"""DeleteConversation locks the conversation, then its runs; a worker or a decision locks a run,
then its conversation. When the two meet, Postgres aborts one of them (deadlock detected), and
the deletion starts again instead of answering INTERNAL (seen in the gRPC fuzz: DeleteConversation
beside the shared runtime's work)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from tether_common.auth import Principal
from tether_runtime.api import erasure
from tether_runtime.store import conversations
from tether_runtime.store.db import create_pool
from tether_testkit.dated_runs import run_minted_at

pytestmark = pytest.mark.process  # a database of its own


async def test_a_deletion_that_deadlocks_with_a_run_update_starts_again(
    private_env: dict[str, str],
) -> None:
    dsn = private_env["DATABASE_URL"]
    pool = await create_pool(dsn)
    other = await asyncpg.connect(dsn)
    try:
        async with pool.acquire() as conn:
            conv = await conversations.create(conn, "alice", "doomed")
            run_id, _ = await run_minted_at(conn, None, conv.id, status="interrupted")
        # The other side: a run locked first (as a worker's write or a decision does)...
        tx = other.transaction()
        await tx.start()
        await other.execute("SELECT 1 FROM run WHERE id = $1 FOR UPDATE", run_id)
        deleting = asyncio.create_task(
            erasure.delete_conversation(pool, Principal(user_id="alice"), conv.id)
        )
        await asyncio.sleep(0.3)  # the deletion holds the conversation and waits for the run
        # ...then its conversation: a cycle. The deletion, waiting longer, is the one aborted.
        await other.execute("UPDATE conversation SET updated_at = now() WHERE id = $1", conv.id)
        await tx.commit()
        erased = await asyncio.wait_for(deleting, 30)
        assert erased.runs == [run_id]
        assert await other.fetchval("SELECT count(*) FROM conversation WHERE id = $1", conv.id) == 0
        assert await other.fetchval("SELECT count(*) FROM run WHERE id = $1", run_id) == 0
    finally:
        await other.close()
        await pool.close()
