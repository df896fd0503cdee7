"""A page of runs in one statement (run_pages.read): the runs newest first, the interrupted
ones' pending interrupts beside them, and, listing one conversation, its owner, whether it has
runs or not (a new LangGraph thread's ListRuns), or None when there is no such conversation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tether_common.ids import new_id
from tether_runtime.store import conversations, interrupts, run_pages, runs
from tether_runtime.store.statement_count import COUNTS
from tether_testkit.running_runs import queued_run


async def _statements(
    conn: Any,
    user_id: str,
    limit: int,
    before_id: str | None,
    conversation_id: str | None,
) -> tuple[run_pages.RunPage, int]:
    listing = runs.listing_query(user_id, limit, before_id, conversation_id=conversation_id)
    before = sum(COUNTS.values())
    page = await run_pages.read(conn, listing, conversation_id)
    return page, sum(COUNTS.values()) - before


async def test_a_conversation_with_and_without_runs_and_none(pool: Any) -> None:
    async with pool.acquire() as conn:
        empty = await conversations.create(conn, "alice", "empty")
        page, statements = await _statements(
            conn, user_id="alice", limit=5, before_id=None, conversation_id=empty.id
        )
        assert (page.runs, page.pending, page.conversation_owner) == ([], {}, "alice")
        assert statements == 1

        page, _ = await _statements(
            conn, user_id="alice", limit=5, before_id=None, conversation_id=new_id("conv")
        )
        assert (page.runs, page.conversation_owner) == ([], None)

        # Another user's conversation: found, with its owner, and none of the runs.
        page, _ = await _statements(
            conn, user_id="bob", limit=5, before_id=None, conversation_id=empty.id
        )
        assert (page.runs, page.conversation_owner) == ([], "alice")


async def test_the_interrupted_runs_pending_interrupt_rides_the_page(pool: Any) -> None:
    async with pool.acquire() as conn:
        conv = await conversations.create(conn, "alice", "page")
        done_id, _ = await queued_run(conn, conv.id)
        asking_id, _ = await queued_run(conn, conv.id)
        answered_id, _ = await queued_run(conn, conv.id)
        await conn.execute("UPDATE run SET status = 'completed' WHERE id = $1", done_id)
        await conn.execute(
            "UPDATE run SET status = 'interrupted' WHERE id = ANY($1::text[])",
            [asking_id, answered_id],
        )
        expires = datetime.now(UTC) + timedelta(hours=1)
        pending_id, resolved_id = new_id("int"), new_id("int")
        await interrupts.create_interrupt(
            conn, pending_id, asking_id, "c1", "confirm_action", "scale", "svc:x", {"q": "ok?"},
            expires,
        )  # fmt: skip
        await interrupts.create_interrupt(
            conn, resolved_id, answered_id, "c1", "confirm_action", "scale", "svc:x", {}, expires
        )
        await conn.execute("UPDATE interrupt SET status = 'resolved' WHERE id = $1", resolved_id)

        for conversation_id in (conv.id, None):
            page, statements = await _statements(
                conn, user_id="alice", limit=5, before_id=None, conversation_id=conversation_id
            )
            assert statements == 1
            if conversation_id is not None:
                assert page.conversation_owner == "alice"
                assert [r.id for r in page.runs] == [answered_id, asking_id, done_id]
            assert set(page.pending) == {asking_id}
            shown = page.pending[asking_id]
            assert (shown.id, shown.run_id, shown.status) == (pending_id, asking_id, "pending")
            assert (shown.payload, shown.kind, shown.approvals_required) == (
                {"q": "ok?"},
                "confirm_action",
                1,
            )

        page, _ = await _statements(
            conn, user_id="alice", limit=1, before_id=asking_id, conversation_id=conv.id
        )
        assert [r.id for r in page.runs] == [done_id] and page.pending == {}
