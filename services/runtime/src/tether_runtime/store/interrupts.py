"""Interrupts and tool calls: the records behind "a dangerous tool runs at most once".

Every path that moves a run and its interrupt locks them in ONE order, in one transaction: the
run row first (`runs.lock`), then the interrupt, then the tool call. `lock_with_run`,
`raise_interrupt` and `resolve` keep that order; resume, cancel, expiry and the worker go through
them. Grants live in `grants.py`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from tether_proto.wire import ToolCallStatus
from tether_sdk import Approval as ApprovalPolicy

from tether_runtime.domain.records import InterruptRow, RunRow, ToolCallRow
from tether_runtime.store import runs
from tether_runtime.store.db import Conn


async def create_interrupt(
    conn: Conn,
    interrupt_id: str,
    run_id: str,
    call_id: str,
    kind: str,
    action: str,
    scope: str,
    payload: dict[str, str],
    expires_at: datetime,
    approval: ApprovalPolicy | None = None,
) -> None:
    """`approval`: who may decide the card (None: the run's owner, with the tool's grant)."""
    await conn.execute(
        "INSERT INTO interrupt (id, run_id, call_id, kind, status, action, scope, payload, "
        "expires_at, approval_grant, self_approval, approvals_required) "
        "VALUES ($1, $2, $3, $4, 'pending', $5, $6, $7, $8, $9, $10, $11)",
        interrupt_id,
        run_id,
        call_id,
        kind,
        action,
        scope,
        payload,
        expires_at,
        approval.grant if approval else None,
        approval.self_approval if approval else True,
        approval.approvals if approval else 1,
    )


async def get_interrupt(conn: Conn, interrupt_id: str) -> InterruptRow | None:
    row = await conn.fetchrow("SELECT * FROM interrupt WHERE id = $1", interrupt_id)
    return InterruptRow.of(row) if row else None


async def for_call(conn: Conn, run_id: str, call_id: str) -> InterruptRow | None:
    """The latest interrupt raised on this tool call of the run."""
    row = await conn.fetchrow(
        "SELECT * FROM interrupt WHERE run_id = $1 AND call_id = $2 "
        "ORDER BY created_at DESC LIMIT 1",
        run_id,
        call_id,
    )
    return InterruptRow.of(row) if row else None


_CALL_AND_INTERRUPT = (
    f"SELECT t.*, {InterruptRow.selected('i')} FROM tool_call t "
    "JOIN LATERAL (SELECT * FROM interrupt WHERE run_id = $1 AND call_id = $2 "
    "ORDER BY created_at DESC LIMIT 1) i ON true WHERE t.run_id = $1 AND t.call_id = $2"
)


async def call_and_interrupt(
    conn: Conn, run_id: str, call_id: str
) -> tuple[ToolCallRow, InterruptRow] | None:
    """The tool call's row and the latest interrupt raised on it (`get_call` and `for_call` in
    one statement); None unless both exist."""
    row = await conn.fetchrow(_CALL_AND_INTERRUPT, run_id, call_id)
    if row is None or (intr := InterruptRow.beside(row)) is None:
        return None
    return ToolCallRow.of(row), intr


async def pending_for_run(conn: Conn, run_id: str) -> InterruptRow | None:
    row = await conn.fetchrow(
        "SELECT * FROM interrupt WHERE run_id = $1 AND status = 'pending'", run_id
    )
    return InterruptRow.of(row) if row else None


async def pending_for_runs(conn: Conn, run_ids: list[str]) -> dict[str, InterruptRow]:
    """Each of these runs' pending interrupt (at most one per run), by run id."""
    if not run_ids:
        return {}
    rows = await conn.fetch(
        "SELECT * FROM interrupt WHERE run_id = ANY($1::text[]) AND status = 'pending'", run_ids
    )
    return {r["run_id"]: InterruptRow.of(r) for r in rows}


async def lock_with_run(
    conn: Conn, run_id: str, interrupt_id: str | None = None
) -> tuple[RunRow | None, InterruptRow | None]:
    """In a transaction: lock the run, then its interrupt (`interrupt_id`, or the run's pending
    one). Under these locks nobody else can decide the interrupt or move the run; an interrupt
    of another run is returned as None (and not locked)."""
    run = await runs.lock(conn, run_id)
    if run is None:
        return None, None
    if interrupt_id is None:
        row = await conn.fetchrow(
            "SELECT * FROM interrupt WHERE run_id = $1 AND status = 'pending' FOR UPDATE", run_id
        )
    else:
        row = await conn.fetchrow(
            "SELECT * FROM interrupt WHERE id = $1 AND run_id = $2 FOR UPDATE",
            interrupt_id,
            run_id,
        )
    return run, InterruptRow.of(row) if row else None


async def resolve(
    conn: Conn,
    intr: InterruptRow,
    *,
    status: str,
    decision: str,
    user_id: str | None,
    call_status: ToolCallStatus,
    call_from: ToolCallStatus = ToolCallStatus.PROPOSED,
    input_text: str | None = None,
    idempotency_key: str | None = None,
    require_unexpired: bool = False,
) -> InterruptRow | None:
    """Decide a pending interrupt and move its tool call from `call_from` to `call_status`, under
    the locks of `lock_with_run` (same transaction). None, and nothing changed, when the interrupt
    is no longer pending (or, with `require_unexpired`, is past its expiry by the store's clock)."""
    claimed = await claim_interrupt(
        conn,
        intr.id,
        status,
        decision,
        user_id,
        input_text,
        idempotency_key,
        require_unexpired=require_unexpired,
    )
    if claimed is not None:
        await decide_call(conn, intr.run_id, intr.call_id, call_status, user_id, call_from)
    return claimed


async def raise_interrupt(
    conn: Conn,
    *,
    interrupt_id: str,
    run_id: str,
    call_id: str,
    tool: str,
    args: dict[str, Any],
    key: str,
    kind: str,
    action: str,
    scope: str,
    payload: dict[str, str],
    expires_at: datetime,
    call_status: ToolCallStatus = ToolCallStatus.PROPOSED,
    call_from: ToolCallStatus | None = None,
) -> None:
    """The worker raising an interrupt on a tool call, in the one lock order: the run (a lease
    holder's transaction holds it already), then the call and the interrupt. The call is inserted
    in `call_status`, or, with `call_from`, an existing call is moved from that status (e.g. an
    `executing` call whose outcome is unknown)."""
    await runs.lock(conn, run_id)
    if call_from is None:
        await propose_call(conn, run_id, call_id, tool, args, key, call_status)
    else:
        await decide_call(conn, run_id, call_id, call_status, None, call_from)
    await create_interrupt(
        conn, interrupt_id, run_id, call_id, kind, action, scope, payload, expires_at
    )


async def claim_interrupt(
    conn: Conn,
    interrupt_id: str,
    status: str,
    decision: str,
    user_id: str | None,
    input_text: str | None,
    idempotency_key: str | None,
    *,
    require_unexpired: bool,
) -> InterruptRow | None:
    """The conditional claim: exactly one caller moves a pending interrupt; None for the rest."""
    row = await conn.fetchrow(
        "UPDATE interrupt SET status = $2, decision = $3, resolved_by = $4, input = $5, "
        "idempotency_key = $6, resolved_at = now() "
        "WHERE id = $1 AND status = 'pending' AND (NOT $7 OR expires_at > now()) RETURNING *",
        interrupt_id,
        status,
        decision,
        user_id,
        input_text,
        idempotency_key,
        require_unexpired,
    )
    return InterruptRow.of(row) if row else None


async def overdue(conn: Conn, limit: int = 50) -> list[InterruptRow]:
    rows = await conn.fetch(
        "SELECT * FROM interrupt WHERE status = 'pending' AND expires_at <= now() "
        "ORDER BY expires_at LIMIT $1",
        limit,
    )
    return [InterruptRow.of(r) for r in rows]


async def orphaned_held(conn: Conn, limit: int = 50) -> list[InterruptRow]:
    """Pending questions a tool asked during its call (runs.hold) whose worker's lease ran out:
    nobody waits for their answer any more."""
    rows = await conn.fetch(
        "SELECT i.* FROM interrupt i JOIN run r ON r.id = i.run_id "
        "WHERE i.status = 'pending' AND r.status = 'interrupted' "
        "AND r.lease_owner IS NOT NULL AND r.lease_expires_at < now() LIMIT $1",
        limit,
    )
    return [InterruptRow.of(r) for r in rows]


async def propose_call(
    conn: Conn,
    run_id: str,
    call_id: str,
    tool: str,
    args: dict[str, Any],
    key: str,
    status: ToolCallStatus = ToolCallStatus.PROPOSED,
) -> None:
    await conn.execute(
        "INSERT INTO tool_call (run_id, call_id, tool, args, status, idempotency_key) "
        "VALUES ($1, $2, $3, $4, $6, $5) ON CONFLICT DO NOTHING",
        run_id,
        call_id,
        tool,
        args,
        key,
        status,
    )


async def decide_call(
    conn: Conn,
    run_id: str,
    call_id: str,
    status: ToolCallStatus,
    user_id: str | None,
    from_status: ToolCallStatus = ToolCallStatus.PROPOSED,
) -> bool:
    """Move the call from `from_status` (a proposal, or e.g. a call whose outcome is unknown) to
    `status`; False when it was not in `from_status`."""
    result = await conn.execute(
        "UPDATE tool_call SET status = $3, approved_by = $4, updated_at = now() "
        "WHERE run_id = $1 AND call_id = $2 AND status = $5",
        run_id,
        call_id,
        status,
        user_id,
        from_status,
    )
    return str(result).endswith(" 1")


async def skip_call(
    conn: Conn, run_id: str, call_id: str, summary: str, result: dict[str, Any]
) -> None:
    """An approved call that will not run (grant revoked, resource changed): it ends `failed`
    without ever being claimed, so no worker can execute it later."""
    await conn.execute(
        "UPDATE tool_call SET status = 'failed', result_summary = $3, result = $4, "
        "updated_at = now() WHERE run_id = $1 AND call_id = $2 AND status = 'approved'",
        run_id,
        call_id,
        summary,
        result,
    )


async def settle_call(
    conn: Conn, run_id: str, call_id: str, summary: str, result: dict[str, Any]
) -> None:
    """The result a person gave a call (marked done), stored as if the call had returned it."""
    await conn.execute(
        "UPDATE tool_call SET result_summary = $3, result = $4, updated_at = now() "
        "WHERE run_id = $1 AND call_id = $2",
        run_id,
        call_id,
        summary,
        result,
    )


async def get_call(conn: Conn, run_id: str, call_id: str) -> ToolCallRow | None:
    row = await conn.fetchrow(
        "SELECT * FROM tool_call WHERE run_id = $1 AND call_id = $2", run_id, call_id
    )
    return ToolCallRow.of(row) if row else None


async def claim_call(
    conn: Conn,
    run_id: str,
    call_id: str,
    tool: str,
    args: dict[str, Any],
    key: str,
    epoch: int,
    from_status: ToolCallStatus | Literal["new"],
) -> bool:
    """Move a call to `executing` for this epoch, from `from_status` (approved, or executing by a
    dead epoch). Read-only calls are inserted straight into `executing`."""
    if from_status == "new":
        result = await conn.execute(
            "INSERT INTO tool_call (run_id, call_id, tool, args, status, idempotency_key, "
            "claimed_epoch) VALUES ($1, $2, $3, $4, 'executing', $5, $6) "
            "ON CONFLICT (run_id, call_id) DO UPDATE SET claimed_epoch = EXCLUDED.claimed_epoch, "
            "updated_at = now() WHERE tool_call.status = 'executing'",
            run_id,
            call_id,
            tool,
            args,
            key,
            epoch,
        )
    else:
        result = await conn.execute(
            "UPDATE tool_call SET status = 'executing', claimed_epoch = $4, updated_at = now() "
            "WHERE run_id = $1 AND call_id = $2 AND status = $3 "
            "AND (claimed_epoch IS NULL OR claimed_epoch < $4)",
            run_id,
            call_id,
            from_status,
            epoch,
        )
    return str(result).endswith(" 1")


async def mark_unknown(conn: Conn, run_id: str, call_id: str, epoch: int) -> bool:
    """A call this epoch claimed whose outcome nobody can tell: it waits for a person."""
    result = await conn.execute(
        "UPDATE tool_call SET status = 'unknown', updated_at = now() "
        "WHERE run_id = $1 AND call_id = $2 AND status = 'executing' AND claimed_epoch = $3",
        run_id,
        call_id,
        epoch,
    )
    return str(result).endswith(" 1")


async def finish_call(
    conn: Conn,
    run_id: str,
    call_id: str,
    epoch: int,
    ok: bool,
    summary: str,
    result: dict[str, Any],
) -> None:
    await conn.execute(
        "UPDATE tool_call SET status = $4, result_summary = $5, result = $6, updated_at = now() "
        "WHERE run_id = $1 AND call_id = $2 AND claimed_epoch = $3",
        run_id,
        call_id,
        epoch,
        ToolCallStatus.SUCCEEDED if ok else ToolCallStatus.FAILED,
        summary,
        result,
    )
