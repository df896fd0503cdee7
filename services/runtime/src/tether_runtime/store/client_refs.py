"""A caller's own ids for its conversations and runs (migration 0022): AG-UI's client picks its
`threadId` and each run's `runId`; these statements keep what each names, per user."""

from __future__ import annotations

from dataclasses import dataclass

from tether_runtime.store.db import Conn


@dataclass(frozen=True)
class RunRef:
    conversation_id: str
    run_id: str
    interrupt_id: str  # the interrupt whose answer began what the id names; "" for the start


async def conversation_of(conn: Conn, user_id: str, client_id: str) -> str | None:
    found: str | None = await conn.fetchval(
        "SELECT conversation_id FROM client_ref "
        "WHERE user_id = $1 AND kind = 'conversation' AND client_id = $2",
        user_id,
        client_id,
    )
    return found


async def client_id_of(conn: Conn, user_id: str, conv_id: str) -> str:
    """The conversation's client id ("" for none)."""
    found: str | None = await conn.fetchval(
        "SELECT client_id FROM client_ref "
        "WHERE user_id = $1 AND kind = 'conversation' AND conversation_id = $2 LIMIT 1",
        user_id,
        conv_id,
    )
    return found or ""


async def take_conversation(conn: Conn, user_id: str, client_id: str, conv_id: str) -> bool:
    """Give the id to the conversation; False when it already names one (which keeps it)."""
    took = await conn.fetchval(
        "INSERT INTO client_ref (user_id, kind, client_id, conversation_id) "
        "VALUES ($1, 'conversation', $2, $3) ON CONFLICT DO NOTHING RETURNING true",
        user_id,
        client_id,
        conv_id,
    )
    return bool(took)


async def run_of(conn: Conn, user_id: str, client_id: str) -> RunRef | None:
    row = await conn.fetchrow(
        "SELECT conversation_id, run_id, interrupt_id FROM client_ref "
        "WHERE user_id = $1 AND kind = 'run' AND client_id = $2",
        user_id,
        client_id,
    )
    if row is None:
        return None
    return RunRef(row["conversation_id"], row["run_id"], row["interrupt_id"])


async def take_run(conn: Conn, user_id: str, client_id: str, ref: RunRef) -> RunRef:
    """Give the id to the run (and interrupt); what it names afterwards: `ref`, or what an
    earlier or concurrent call gave it first."""
    row = await conn.fetchrow(
        "WITH new AS (INSERT INTO client_ref "
        "(user_id, kind, client_id, conversation_id, run_id, interrupt_id) "
        "VALUES ($1, 'run', $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1) "
        "SELECT EXISTS (SELECT 1 FROM new) AS took",
        user_id,
        client_id,
        ref.conversation_id,
        ref.run_id,
        ref.interrupt_id,
    )
    if row is not None and row["took"]:
        return ref
    found = await run_of(conn, user_id, client_id)
    assert found is not None
    return found
