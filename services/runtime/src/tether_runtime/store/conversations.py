"""Conversations and messages."""

from __future__ import annotations

from typing import Any

from tether_common.ids import new_id

from tether_runtime.domain.records import ConversationRow, MessageRow
from tether_runtime.store.db import Conn, Pool

TURNS_PAGE = 32
"""Turns read at a time to build a run's starting context (context.py, the claim in runs.py)."""


async def create(conn: Conn, user_id: str, title: str) -> ConversationRow:
    row = await conn.fetchrow(
        "INSERT INTO conversation (id, user_id, title) VALUES ($1, $2, $3) RETURNING *",
        new_id("conv"),
        user_id,
        title,
    )
    assert row is not None
    return ConversationRow.of(row)


async def get(conn: Conn, conversation_id: str) -> ConversationRow | None:
    row = await conn.fetchrow("SELECT * FROM conversation WHERE id = $1", conversation_id)
    return ConversationRow.of(row) if row else None


async def list_for_user(
    conn: Conn, user_id: str, limit: int, before_id: str | None
) -> list[ConversationRow]:
    rows = await conn.fetch(
        "SELECT * FROM conversation WHERE user_id = $1 AND ($2::text IS NULL OR id < $2) "
        "ORDER BY id DESC LIMIT $3",
        user_id,
        before_id,
        limit,
    )
    return [ConversationRow.of(r) for r in rows]


async def add_message(
    conn: Conn,
    conversation_id: str,
    role: str,
    content: str,
    *,
    run_id: str | None = None,
    message_id: str | None = None,
    tool_call_id: str | None = None,
) -> MessageRow:
    row = await conn.fetchrow(
        "INSERT INTO message (id, conversation_id, run_id, role, content, tool_call_id) "
        "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content "
        "RETURNING *",
        message_id or new_id("msg"),
        conversation_id,
        run_id,
        role,
        content,
        tool_call_id,
    )
    assert row is not None
    return MessageRow.of(row)


async def messages(
    conn: Conn, conversation_id: str, limit: int, after_id: str | None = None
) -> list[MessageRow]:
    rows = await conn.fetch(
        "SELECT * FROM message WHERE conversation_id = $1 AND ($2::text IS NULL OR id > $2) "
        "ORDER BY id LIMIT $3",
        conversation_id,
        after_id,
        limit,
    )
    return [MessageRow.of(r) for r in rows]


async def recent_turns(
    conn: Conn, conversation_id: str, limit: int, up_to_id: str
) -> list[MessageRow]:
    """The last `limit` user/assistant messages up to and including `up_to_id` (a run's own
    message: later ones belong to other runs), oldest first."""
    rows = await conn.fetch(
        "SELECT * FROM (SELECT * FROM message WHERE conversation_id = $1 "
        "AND role IN ('user', 'assistant') AND id <= $3 ORDER BY id DESC LIMIT $2) m ORDER BY id",
        conversation_id,
        limit,
        up_to_id,
    )
    return [MessageRow.of(r) for r in rows]


async def merge_facts(conn: Conn, conversation_id: str, facts: dict[str, Any]) -> None:
    """Confirmed facts only: called with validated tool results, in the transaction that stores them."""
    await conn.execute(
        "UPDATE conversation SET facts = facts || $2::jsonb, version = version + 1, "
        "updated_at = now() WHERE id = $1",
        conversation_id,
        facts,
    )


async def turns_before(
    conn: Conn | Pool, conversation_id: str, up_to_id: str | None, before_id: str | None, limit: int
) -> list[MessageRow]:
    """User/assistant messages newest first: up to and including `up_to_id` (None: the newest)
    and before `before_id` (the next page), at most `limit`."""
    rows = await conn.fetch(
        "SELECT * FROM message WHERE conversation_id = $1 AND role IN ('user', 'assistant') "
        "AND ($2::text IS NULL OR id <= $2) AND ($3::text IS NULL OR id < $3) "
        "ORDER BY id DESC LIMIT $4",
        conversation_id,
        up_to_id,
        before_id,
        limit,
    )
    return [MessageRow.of(r) for r in rows]


async def get_with_turns(
    conn: Conn | Pool, conversation_id: str, up_to_id: str, limit: int
) -> tuple[ConversationRow | None, list[MessageRow]]:
    """The conversation and its newest user/assistant messages up to and including `up_to_id`
    (newest first, at most `limit`) in one round trip: what a run's context is built from."""
    rows = await conn.fetch(
        "SELECT c.*, m.id AS m_id, m.run_id AS m_run_id, m.role AS m_role, "
        "m.content AS m_content, m.tool_call_id AS m_tool_call_id, "
        "m.created_at AS m_created_at FROM conversation c LEFT JOIN LATERAL ("
        "SELECT * FROM message WHERE conversation_id = c.id AND role IN ('user', 'assistant') "
        "AND id <= $2 ORDER BY id DESC LIMIT $3) m ON true "
        "WHERE c.id = $1 ORDER BY m.id DESC",
        conversation_id,
        up_to_id,
        limit,
    )
    if not rows:
        return None, []
    turns = [
        MessageRow(
            id=r["m_id"],
            conversation_id=conversation_id,
            run_id=r["m_run_id"],
            role=r["m_role"],
            content=r["m_content"],
            tool_call_id=r["m_tool_call_id"],
            created_at=r["m_created_at"],
        )
        for r in rows
        if r["m_id"] is not None
    ]
    return ConversationRow.of(rows[0]), turns


async def turns_between(
    conn: Conn, conversation_id: str, after_id: str, before_id: str | None, limit: int
) -> list[MessageRow]:
    """User/assistant messages after `after_id` ('' : from the first) and before `before_id`
    (None: to the newest), oldest first, at most `limit`."""
    rows = await conn.fetch(
        "SELECT * FROM message WHERE conversation_id = $1 AND role IN ('user', 'assistant') "
        "AND id > $2 AND ($3::text IS NULL OR id < $3) ORDER BY id LIMIT $4",
        conversation_id,
        after_id,
        before_id,
        limit,
    )
    return [MessageRow.of(r) for r in rows]


async def store_summary(
    conn: Conn, conversation_id: str, summary: str, through: str, expected_through: str
) -> bool:
    """The summary of every turn up to `through`, stored only if the stored one still covers
    exactly `expected_through` (compare-and-set): a slower pod never replaces a newer summary
    with an older one. False: someone else's summary won."""
    status = await conn.execute(
        "UPDATE conversation SET summary = $2, summary_through = $3, updated_at = now() "
        "WHERE id = $1 AND summary_through = $4 AND $3 > $4",
        conversation_id,
        summary,
        through,
        expected_through,
    )
    return bool(status == "UPDATE 1")
