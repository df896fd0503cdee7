"""Confirmation cards written straight to the store: a run of `user` left interrupted at a
pending `confirm_action` card, many at once (raising 200 cards through real runs would take
minutes). What inbox tests need: cards the caller may not decide, in bulk, older than theirs."""

from __future__ import annotations

import datetime as dt

from tether_common.ids import new_id, new_id_after
from tether_runtime.store import conversations, interrupts
from tether_runtime.store.db import Conn, create_pool
from tether_sdk import Approval

from tether_testkit.dated_runs import run_minted_at


async def seed_cards(
    dsn: str,
    user: str,
    scopes: list[str],
    *,
    grant: str,
    action: str = "instance.restart",
    self_approval: bool = True,
) -> list[str]:
    """One interrupted run of `user` per scope, each waiting at a card governed by `grant` (who
    may approve it, on its scope); returns the cards' interrupt ids, oldest first. (A pool of
    the runtime's own: its JSON codecs are what the store's functions expect.)"""
    pool = await create_pool(dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            return await _seed(conn, user, scopes, grant, action, self_approval)
    finally:
        await pool.close()


async def _seed(
    conn: Conn, user: str, scopes: list[str], grant: str, action: str, self_approval: bool
) -> list[str]:
    conv = await conversations.create(conn, user, "seeded cards")
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    ids = []
    for scope in scopes:
        # (Its event log is run_minted_at's: no test resumes a seeded card, it only lists it.)
        run_id, _ = await run_minted_at(
            conn, None, conv.id, user=user, deltas=0, status="interrupted"
        )
        # Oldest first is id order (the inbox's): two cards made in one millisecond would sort by
        # their ids' random part, so each id is made to sort after the one before.
        interrupt_id = new_id_after("int", ids[-1]) if ids else new_id("int")
        await interrupts.create_interrupt(
            conn,
            interrupt_id,
            run_id,
            new_id("call"),
            "confirm_action",
            action,
            scope,
            {"title": f"seeded card on {scope}"},
            expires,
            Approval(grant=grant, self_approval=self_approval),
        )
        ids.append(interrupt_id)
    return ids
