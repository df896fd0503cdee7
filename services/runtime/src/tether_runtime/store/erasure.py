"""Deleting conversations and erasing a user (issue 18), table by table, in one transaction.

Which tables hold a conversation's data is read from the catalog, not listed here: every table of
the schema with a column naming a run (`run_id`, `tether_run_id`), a conversation
(`conversation_id`, LangGraph's `thread_id`) or, when a user is erased, a user (`user_id`), so a
table a later migration or an agent adds is covered the day it exists. Rows are deleted in
foreign-key order (referencing tables first). Two tables are special: `idempotency_key` (a stored
answer names its run inside `response`; an erased user's keys are those of their scopes) and
`audit_record`, never deleted: its records of these runs (and the erased user's) are masked by
`audit_mask()` (migration 0014), the one change its trigger allows."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether_runtime.store.db import Conn

RUN_COLUMNS = ("run_id", "tether_run_id")
CONVERSATION_COLUMNS = ("conversation_id", "thread_id")
USER_COLUMNS = ("user_id",)
KEPT = ("audit_record", "schema_migration")
IDEMPOTENCY = "idempotency_key"
USER_SCOPES = ("start", "resume")  # idempotency scopes are "<kind>:<user id>"


@dataclass
class Erased:
    conversations: list[str]
    runs: list[str]
    rows: dict[str, int] = field(default_factory=dict)
    """Rows deleted per table."""
    audit_masked: int = 0


class RunStillRunning(Exception):
    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


async def _tables(conn: Conn, with_users: bool) -> dict[str, list[str]]:
    """table -> the columns of it that name what is being deleted."""
    wanted = [*RUN_COLUMNS, *CONVERSATION_COLUMNS, *(USER_COLUMNS if with_users else ())]
    rows = await conn.fetch(
        "SELECT c.table_name, array_agg(c.column_name::text ORDER BY c.column_name) AS cols "
        "FROM information_schema.columns c JOIN information_schema.tables t "
        "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
        "WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' "
        "AND c.column_name = ANY($1::text[]) "
        # A partition (run_event's days, migration 0019) is deleted from through its parent.
        "AND NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid "
        "JOIN pg_namespace n ON n.oid = p.relnamespace "
        "WHERE p.relname = c.table_name AND n.nspname = c.table_schema) "
        "GROUP BY c.table_name",
        wanted,
    )
    out = {r["table_name"]: list(r["cols"]) for r in rows if r["table_name"] not in KEPT}
    out.setdefault("conversation", [])  # by its own id
    return out


async def _delete_order(conn: Conn, tables: list[str]) -> list[str]:
    """Referencing tables before the tables they reference (a table referencing itself is
    deleted from in one statement, which Postgres checks at its end)."""
    edges = await conn.fetch(
        "SELECT conrelid::regclass::text AS child, confrelid::regclass::text AS parent "
        "FROM pg_constraint WHERE contype = 'f' AND connamespace = current_schema()::regnamespace"
    )
    names = {t: t for t in tables} | {f'"{t}"': t for t in tables}
    parents: dict[str, set[str]] = {t: set() for t in tables}
    for e in edges:
        child, parent = names.get(e["child"]), names.get(e["parent"])
        if child and parent and child != parent:
            parents[child].add(parent)
    order: list[str] = []
    left = set(tables)
    while left:
        # A table no remaining table references goes next.
        ready = sorted(t for t in left if not any(t in parents[o] for o in left if o != t))
        if not ready:
            raise RuntimeError(f"foreign keys form a cycle among {sorted(left)}")
        order.extend(ready)
        left -= set(ready)
    return order


def _predicate(
    table: str, cols: list[str], runs: list[str], convs: list[str], user: str | None
) -> tuple[str, list[object]]:
    """The WHERE clause for one table, and its arguments ($1... in order of use)."""
    args: list[object] = []

    def arg(value: object, cast: str) -> str:
        args.append(value)
        return f"${len(args)}::{cast}"

    parts = []
    for col in cols:
        if col in RUN_COLUMNS:
            parts.append(f'"{col}" = ANY({arg(runs, "text[]")})')
        elif col in CONVERSATION_COLUMNS:
            parts.append(f'"{col}" = ANY({arg(convs, "text[]")})')
        elif col in USER_COLUMNS and user is not None:
            parts.append(f'"{col}" = {arg(user, "text")}')
    if table == "conversation":
        parts.append(f"id = ANY({arg(convs, 'text[]')})")
    if table == IDEMPOTENCY:
        parts.append(f"response -> 'run' ->> 'id' = ANY({arg(runs, 'text[]')})")
        if user is not None:
            scopes = [f"{kind}:{user}" for kind in USER_SCOPES]
            parts.append(f"scope = ANY({arg(scopes, 'text[]')})")
    return " OR ".join(parts) or "false", args


async def erase(conn: Conn, conversation_ids: list[str], user: str | None = None) -> Erased:
    """In the caller's transaction: delete these conversations (and, with `user`, everything
    else naming that user) everywhere, and mask the audit records. RunStillRunning (nothing
    changed once the transaction rolls back) if a worker holds one of their runs: it must be
    cancelled first. Queued, waiting and interrupted runs are deleted with the rest (their rows
    are locked first, so no worker claims one meanwhile: the claim skips locked rows)."""
    runs = await conn.fetch(
        "SELECT id, status FROM run WHERE conversation_id = ANY($1::text[]) "
        "OR ($2::text IS NOT NULL AND user_id = $2) ORDER BY id FOR UPDATE",
        conversation_ids,
        user,
    )
    running = [r["id"] for r in runs if r["status"] == "running"]
    if running:
        raise RunStillRunning(running[-1])
    run_ids = [r["id"] for r in runs]
    tables = await _tables(conn, user is not None)
    tables.setdefault(IDEMPOTENCY, [])
    out = Erased(conversation_ids, run_ids)
    for table in await _delete_order(conn, list(tables)):
        where, args = _predicate(table, tables[table], run_ids, conversation_ids, user)
        result = await conn.execute(f'DELETE FROM "{table}" WHERE {where}', *args)
        n = int(result.rsplit(" ", 1)[-1])
        if n:
            out.rows[table] = n
    out.audit_masked = int(
        await conn.fetchval("SELECT audit_mask($1::text[], $2::text)", run_ids, user) or 0
    )
    return out


async def user_conversations(conn: Conn, user: str) -> list[str]:
    rows = await conn.fetch("SELECT id FROM conversation WHERE user_id = $1", user)
    return [r["id"] for r in rows]
