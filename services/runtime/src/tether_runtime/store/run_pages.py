"""A page of runs as ListRuns shows it, read in one statement: the runs newest first (the
filters of runs.listing_query), the pending interrupt of each interrupted one beside it, and,
for a listing of one conversation, the conversation's owner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether_runtime.domain.records import InterruptRow, RunRow
from tether_runtime.store.db import Conn

# A pending interrupt's columns beside its listed run (InterruptRow.beside).
_PENDING = InterruptRow.selected("i")


@dataclass(frozen=True)
class RunPage:
    """A page of runs newest first, each interrupted one's pending interrupt (by run id), and,
    for a listing of one conversation, the conversation's owner (None: no such conversation)."""

    runs: list[RunRow]
    pending: dict[str, InterruptRow]
    conversation_owner: str | None = None


async def read(
    conn: Conn, listing: tuple[str, list[Any]], conversation_id: str | None = None
) -> RunPage:
    """The page `listing` selects (runs.listing_query's statement and arguments: whose runs,
    after which, which filters), with the interrupted runs' pending interrupts and, for
    `conversation_id` (the listing's own), the conversation's owner, in one statement (a
    ListRuns on a thread is the LangGraph API's most frequent read: the SDK asks for the run
    after every stream)."""
    page, args = listing[0], list(listing[1])
    listed = (
        f"SELECT p.*, {_PENDING} FROM ({page}) p LEFT JOIN interrupt i "
        "ON i.run_id = p.id AND i.status = 'pending' AND p.status = 'interrupted'"
    )
    if conversation_id is None:
        rows = await conn.fetch(f"{listed} ORDER BY p.id DESC", *args)
        owner = None
    else:
        # One row with no run for a conversation without any; none for no conversation.
        args.append(conversation_id)
        rows = await conn.fetch(
            f"SELECT c.user_id AS conversation_owner, l.* FROM conversation c "
            f"LEFT JOIN ({listed}) l ON true WHERE c.id = ${len(args)} ORDER BY l.id DESC",
            *args,
        )
        owner = rows[0]["conversation_owner"] if rows else None
    found = [r for r in rows if r["id"] is not None]
    return RunPage(
        runs=[RunRow.of(r) for r in found],
        pending={r["id"]: i for r in found if (i := InterruptRow.beside(r)) is not None},
        conversation_owner=owner,
    )
