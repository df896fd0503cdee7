"""The worker's claim returns each run's conversation (runs.claim_with_conversations): the same
row a read of it gives, as of the claim, so the executor's first step reads nothing more."""

from __future__ import annotations

from typing import Any

from tether_runtime.store import conversations, runs
from tether_testkit.running_runs import queued_run


async def _queue(conn: Any, conv_id: str) -> str:
    run_id, _ = await queued_run(conn, conv_id)
    return run_id


async def test_each_claimed_run_comes_with_its_conversation(pool: Any) -> None:
    async with pool.acquire() as conn:
        first = await conversations.create(conn, "alice", "one")
        second = await conversations.create(conn, "alice", "two")
        await conn.execute(
            "UPDATE conversation SET facts = $2::jsonb, summary = 'so far', version = 7 "
            "WHERE id = $1",
            second.id,
            {"service": "checkout"},
        )
        queued = {await _queue(conn, first.id): first.id, await _queue(conn, second.id): second.id}
        claimed = await runs.claim_with_conversations(conn, "A", 30, 10)
        assert {c.run.id for c in claimed} == set(queued)
        for c in claimed:
            assert c.conversation is not None
            assert c.conversation.id == queued[c.run.id] == c.run.conversation_id
            assert c.conversation == await conversations.get(conn, c.run.conversation_id)
            assert not c.took_over and c.run.lease_owner == "A"
        two = next(c.conversation for c in claimed if c.run.conversation_id == second.id)
        assert two is not None
        assert (two.facts, two.summary, two.version) == ({"service": "checkout"}, "so far", 7)
        # The plain claim is the same statement: nothing left to take.
        assert await runs.claim_batch(conn, "B", 30, 10) == []
