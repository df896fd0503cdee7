"""Typed rows: what the store hands the engine, so no asyncpg Record leaks past the store."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import asyncpg
from tether_proto import wire
from tether_proto.wire import ToolCallStatus

TERMINAL_STATUSES = wire.TERMINAL_RUN_STATUSES


@dataclass(frozen=True)
class RunRow:
    id: str
    conversation_id: str
    user_id: str
    user_message_id: str
    agent: str
    status: str
    checkpoint: dict[str, Any]
    lease_owner: str | None
    lease_epoch: int
    cancel_requested: bool
    cancel_reason: str
    last_sequence: int
    step_streamed: int
    trace_context: dict[str, Any]
    # Claims since the run last paused or started fresh, this worker's included (migration 0003).
    attempts: int
    created_at: datetime
    updated_at: datetime
    input: dict[str, Any] | None = None
    """A graph agent's input as StartRun's `input_json` gave it (migration 0021); None: the run
    started from its text."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def of(cls, r: asyncpg.Record) -> RunRow:
        return cls(
            id=r["id"],
            conversation_id=r["conversation_id"],
            user_id=r["user_id"],
            user_message_id=r["user_message_id"],
            agent=r["agent"],
            status=r["status"],
            checkpoint=r["checkpoint"] or {},
            lease_owner=r["lease_owner"],
            lease_epoch=r["lease_epoch"],
            cancel_requested=r["cancel_requested"],
            cancel_reason=r["cancel_reason"],
            last_sequence=r["last_sequence"],
            step_streamed=r["step_streamed"],
            trace_context=r["trace_context"] or {},
            attempts=r["attempts"],
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            input=r.get("input"),
        )


@dataclass(frozen=True)
class InterruptRow:
    id: str
    run_id: str
    call_id: str
    kind: str
    status: str
    action: str
    scope: str
    payload: dict[str, Any]
    expires_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    decision: str | None
    input: str | None
    # The approval policy the card was raised with (migration 0011); None: the owner decides.
    approval_grant: str | None = None
    self_approval: bool = True
    approvals_required: int = 1

    @staticmethod
    def selected(alias: str) -> str:
        """The select list of an interrupt row beside another table's (`{alias}.{column} AS
        i_{column}`), which `beside` reads back."""
        return ", ".join(f"{alias}.{c} AS {_BESIDE}{c}" for c in _INTERRUPT_COLUMNS)

    @classmethod
    def beside(cls, r: asyncpg.Record) -> InterruptRow | None:
        """The interrupt `selected` put beside another row; None where the join found none."""
        return None if r[f"{_BESIDE}id"] is None else cls.of(r, _BESIDE)

    @classmethod
    def of(cls, r: asyncpg.Record, prefix: str = "") -> InterruptRow:
        """`prefix`: the columns come named `{prefix}{column}` (beside another table's)."""
        return cls(
            id=r[f"{prefix}id"],
            run_id=r[f"{prefix}run_id"],
            call_id=r[f"{prefix}call_id"],
            kind=r[f"{prefix}kind"],
            status=r[f"{prefix}status"],
            action=r[f"{prefix}action"],
            scope=r[f"{prefix}scope"],
            payload=r[f"{prefix}payload"],
            expires_at=r[f"{prefix}expires_at"],
            resolved_at=r[f"{prefix}resolved_at"],
            resolved_by=r[f"{prefix}resolved_by"],
            decision=r[f"{prefix}decision"],
            input=r[f"{prefix}input"],
            approval_grant=r.get(f"{prefix}approval_grant"),
            self_approval=r.get(f"{prefix}self_approval", True),
            approvals_required=r.get(f"{prefix}approvals_required", 1),
        )


_INTERRUPT_COLUMNS = tuple(f.name for f in fields(InterruptRow))
_BESIDE = "i_"  # the prefix of an interrupt's columns beside another row's (`selected`)


@dataclass(frozen=True)
class ToolCallRow:
    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    status: ToolCallStatus
    result_summary: str | None
    result: dict[str, Any] | None
    idempotency_key: str
    claimed_epoch: int | None
    approved_by: str | None

    @classmethod
    def of(cls, r: asyncpg.Record) -> ToolCallRow:
        return cls(
            run_id=r["run_id"],
            call_id=r["call_id"],
            tool=r["tool"],
            args=r["args"],
            status=ToolCallStatus(r["status"]),
            result_summary=r["result_summary"],
            result=r["result"],
            idempotency_key=r["idempotency_key"],
            claimed_epoch=r["claimed_epoch"],
            approved_by=r["approved_by"],
        )


@dataclass(frozen=True)
class ConversationRow:
    id: str
    user_id: str
    title: str
    facts: dict[str, Any]
    summary: str
    summary_through: str
    """The newest message the model-written summary covers ('': none yet; migration 0006)."""
    version: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, r: asyncpg.Record, prefix: str = "") -> ConversationRow:
        """`prefix`: the columns come named `{prefix}{column}` (beside another table's)."""
        return cls(
            id=r[f"{prefix}id"],
            user_id=r[f"{prefix}user_id"],
            title=r[f"{prefix}title"],
            facts=r[f"{prefix}facts"] or {},
            summary=r[f"{prefix}summary"],
            summary_through=r[f"{prefix}summary_through"],
            version=r[f"{prefix}version"],
            created_at=r[f"{prefix}created_at"],
            updated_at=r[f"{prefix}updated_at"],
        )


@dataclass(frozen=True)
class MessageRow:
    id: str
    conversation_id: str
    run_id: str | None
    role: str
    content: str
    tool_call_id: str | None
    created_at: datetime

    @classmethod
    def of(cls, r: asyncpg.Record) -> MessageRow:
        return cls(
            id=r["id"],
            conversation_id=r["conversation_id"],
            run_id=r["run_id"],
            role=r["role"],
            content=r["content"],
            tool_call_id=r["tool_call_id"],
            created_at=r["created_at"],
        )
