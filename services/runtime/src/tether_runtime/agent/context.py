"""Context assembly as in the seed: confirmed facts, a summary of earlier turns, and the recent
turns verbatim, within a budget."""

from __future__ import annotations

import json
from typing import Any

from tether_runtime.store import conversations
from tether_runtime.store.db import Conn
from tether_runtime.store.records import ConversationRow

RECENT_TURNS = 8
BUDGET_CHARS = 6000


def system_text(conv: ConversationRow) -> str:
    return (
        f"Known facts: {json.dumps(conv.facts, sort_keys=True)}\n"
        f"Earlier summary: {conv.summary or '(none)'}\n"
        'Use the recent verbatim turns to understand who "it" / "the one just now" refers to; '
        "don't guess by keywords. Mutating tools need a person's approval."
    )


async def initial_messages(
    conn: Conn, conversation_id: str, user_message_id: str, text: str | None = None
) -> list[dict[str, Any]]:
    """The recent turns up to the run's own message (newest last), cut to the budget. `text`:
    the run's own message when it is not stored yet (StartRun builds the context before it
    inserts the message, in the same statement as the run)."""
    limit = RECENT_TURNS - (text is not None)
    stored = await conversations.recent_turns(conn, conversation_id, limit, user_message_id)
    turns = [(m.role, m.content) for m in stored] + ([("user", text)] if text is not None else [])
    out: list[dict[str, Any]] = []
    used = 0
    for role, content in reversed(turns):
        used += len(content)
        if out and used > BUDGET_CHARS:
            break
        out.append({"role": role, "content": content})
    return list(reversed(out))


async def update_summary(conn: Conn, conversation_id: str) -> None:
    """Fold turns that fell out of the recent window into a short summary."""
    older = await conversations.older_questions(conn, conversation_id, RECENT_TURNS // 2, 10)
    if not older:
        return
    asked = "; ".join(q[:80] for q in older)
    await conversations.set_summary(conn, conversation_id, f"Earlier the user asked: {asked}"[:600])
