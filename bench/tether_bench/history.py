"""The `history` scenario's preload: a database that has been in use. COPY writes `runs` runs
(in conversations of `runs_per_conversation`), `events` events spread evenly over them, encoded by
the runtime's own encoder (`tether_runtime.domain.events`, `store.event_log.stamp`), the runs' user and
assistant messages and tool calls, and `waiting` of the runs interrupted on a pending approval
(the rest completed, their checkpoints compacted as the compaction loop leaves them). Then VACUUM
ANALYZE, so the planner sees the tables as they are.

Rows go through COPY into the tables by column name (`run_event` among them), so the preload
works whether `run_event` is one table or partitioned. Every row is stamped within the last
`spread_s` seconds (default one hour): a history of months needs partitions for those months."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

# A tenth of the history is the bench user's, the rest is spread over other users.
BENCH_USER = "alice"
OTHER_USERS = 997
COPIERS = 2  # connections writing batches while the next one is generated


def _user(i: int) -> str:
    return BENCH_USER if i % 10 == 0 else f"hist-u{i % OTHER_USERS}"


def _run_events(run: int, n: int, waiting: bool, expires: datetime) -> list[Any]:
    """Templates of one run's events: run_started, a read tool, deltas, then done (or, for a
    waiting run, the interrupt it waits on). Fresh objects, stamped once by the caller."""
    from tether_runtime.domain import events as ev

    conv = f"hconv{run // 10}"
    call = f"hcall{run}"
    head = [
        ev.run_started(conv),
        ev.tool_started(call, "recent_errors", "service=payment-api env=prod"),
        ev.tool_finished(call, "recent_errors", True, "3 recent errors (1 5xx)"),
    ]
    tail = (
        ev.interrupt(
            f"hint{run}",
            "confirm_action",
            {"title": "Restart instance", "target": "instance payment-api-2", "risk": "high"},
            expires,
        )
        if waiting
        else ev.done(f"hmsg{run}a", 120, 40, 2)
    )
    deltas = [ev.text_delta(f"hmsg{run}a", f"t{i} ") for i in range(max(0, n - len(head) - 1))]
    return [*head, *deltas, tail][:n]


class Preload:
    def __init__(
        self,
        runs: int,
        events: int,
        waiting: int,
        runs_per_conversation: int = 10,
        spread_s: float = 3600.0,
        batch_runs: int = 2000,
    ) -> None:
        if waiting > runs or runs <= 0 or events < runs:
            raise ValueError("history: need runs >= waiting, events >= runs > 0")
        self.runs, self.events, self.waiting = runs, events, waiting
        self.per_conv = runs_per_conversation
        self.spread_s = spread_s
        self.batch_runs = batch_runs
        self.now = datetime.now(UTC)
        self.expires = self.now + timedelta(days=7)  # the expiry loop leaves them pending
        # waiting runs are spread over the history, every (runs // waiting)-th run
        self.every = max(1, runs // max(1, waiting))

    def is_waiting(self, i: int) -> bool:
        return self.waiting > 0 and i % self.every == 0 and i // self.every < self.waiting

    def created(self, i: int) -> datetime:
        return self.now - timedelta(seconds=self.spread_s * (1 - i / self.runs))

    def events_of(self, i: int) -> int:
        """Events of run i: the total spread evenly, the remainder on the first runs."""
        base, extra = divmod(self.events, self.runs)
        return base + (1 if i < extra else 0)

    def conversations(self) -> list[tuple[Any, ...]]:
        n = (self.runs + self.per_conv - 1) // self.per_conv
        return [
            (f"hconv{c}", _user(c * self.per_conv), "history", self.created(c * self.per_conv))
            for c in range(n)
        ]

    def batches(self) -> Iterator[dict[str, list[tuple[Any, ...]]]]:
        from tether_runtime.domain.events import timestamp
        from tether_runtime.store.event_log import stamp

        for lo in range(0, self.runs, self.batch_runs):
            rows: dict[str, list[tuple[Any, ...]]] = {
                "message": [],
                "run": [],
                "tool_call": [],
                "interrupt": [],
                "run_event": [],
            }
            for i in range(lo, min(self.runs, lo + self.batch_runs)):
                rid, conv, user = f"hrun{i}", f"hconv{i // self.per_conv}", _user(i)
                at = self.created(i)
                waiting = self.is_waiting(i)
                n = self.events_of(i)
                rows["message"].append((f"hmsg{i}u", conv, rid, "user", "show recent errors", at))
                if not waiting:
                    rows["message"].append(
                        (f"hmsg{i}a", conv, rid, "assistant", "payment-api had 3 errors.", at)
                    )
                rows["run"].append(
                    (
                        rid,
                        conv,
                        user,
                        f"hmsg{i}u",
                        "opspilot",
                        "interrupted" if waiting else "completed",
                        "{}" if waiting else '{"compacted": true}',
                        not waiting,
                        1,
                        n,
                        at,
                        at,
                        at,
                    )
                )
                rows["tool_call"].append(
                    (
                        rid,
                        f"hcall{i}",
                        "recent_errors",
                        '{"service": "payment-api", "env": "prod"}',
                        "succeeded",
                        f"{rid}:hcall{i}",
                        1,
                        at,
                        at,
                    )
                )
                if waiting:
                    rows["interrupt"].append(
                        (
                            f"hint{i}",
                            rid,
                            f"hcall{i}r",
                            "confirm_action",
                            "pending",
                            "instance.restart",
                            "payment-api/prod",
                            '{"title": "Restart instance", "risk": "high"}',
                            self.expires,
                            at,
                        )
                    )
                stamped = stamp(rid, 1, _run_events(i, n, waiting, self.expires), timestamp(at))
                rows["run_event"].extend((*r, at) for r in stamped)
            yield rows


COLUMNS = {
    "conversation": ["id", "user_id", "title", "created_at"],
    "message": ["id", "conversation_id", "run_id", "role", "content", "created_at"],
    "run": [
        "id",
        "conversation_id",
        "user_id",
        "user_message_id",
        "agent",
        "status",
        "checkpoint",
        "checkpoint_compacted",
        "lease_epoch",
        "last_sequence",
        "queued_at",
        "created_at",
        "updated_at",
    ],
    "tool_call": [
        "run_id",
        "call_id",
        "tool",
        "args",
        "status",
        "idempotency_key",
        "claimed_epoch",
        "created_at",
        "updated_at",
    ],
    "interrupt": [
        "id",
        "run_id",
        "call_id",
        "kind",
        "status",
        "action",
        "scope",
        "payload",
        "expires_at",
        "created_at",
    ],
    "run_event": ["run_id", "sequence", "type", "data", "created_at"],
}


async def preload(dsn: str, params: dict[str, Any], log: Any = None) -> dict[str, Any]:
    """Write the history into the database at `dsn`; returns what was written and how long."""
    p = Preload(
        int(params["runs"]),
        int(params["events"]),
        int(params["waiting"]),
        spread_s=float(params.get("spread_s", 3600.0)),
    )
    t0 = time.monotonic()
    counts = {t: 0 for t in COLUMNS}
    conns = [await asyncpg.connect(dsn) for _ in range(COPIERS)]
    try:
        await _copy(conns[0], "conversation", p.conversations(), counts)
        # Batches are generated here while COPIERS connections write earlier ones: a COPY's
        # rows are sent at once, and the server works on them while the next batch is built.
        queue: asyncio.Queue[dict[str, list[tuple[Any, ...]]] | None] = asyncio.Queue(COPIERS)

        async def copier(conn: asyncpg.Connection) -> None:
            while (rows := await queue.get()) is not None:
                # messages before runs before the rest: the tables' foreign keys
                for table in ("message", "run", "tool_call", "interrupt", "run_event"):
                    await _copy(conn, table, rows[table], counts)

        copiers = [asyncio.create_task(copier(c)) for c in conns]
        try:
            for i, rows in enumerate(p.batches()):
                await queue.put(rows)
                if log is not None and i % 10 == 9:
                    log(f"history: {counts['run']} runs, {counts['run_event']} events written")
            for _ in copiers:
                await queue.put(None)
            await asyncio.gather(*copiers)
        finally:
            for t in copiers:
                t.cancel()
        copied_s = time.monotonic() - t0
        for table in COLUMNS:
            await conns[0].execute(f'VACUUM ANALYZE "{table}"')
        # On disk, with indexes (a partitioned table's partitions summed): what a day of
        # history costs (docs/capacity.md).
        # A plain table has no partition tree (no rows): its own size then.
        sizes = {
            table: int(
                await conns[0].fetchval(
                    "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) "
                    "FROM pg_partition_tree($1::regclass)), pg_total_relation_size($1::regclass))",
                    table,
                )
            )
            for table in COLUMNS
        }
        # The preload's dirty pages are written out before anything is measured: otherwise the
        # checkpoint and the kernel's writeback run during the scenario and every figure after
        # the preload pays for them (seen: 20-70% worse, runtime CPU included).
        try:
            await conns[0].execute("CHECKPOINT")
        except asyncpg.InsufficientPrivilegeError:  # neither superuser nor pg_checkpoint
            if log is not None:
                log("history: CHECKPOINT not permitted; the scenario may pay for the writeback")
        await asyncio.to_thread(os.sync)
    finally:
        for c in conns:
            await c.close()
    return {
        **{f"{t}_rows": n for t, n in counts.items()},
        "copy_s": round(copied_s, 1),
        "total_s": round(time.monotonic() - t0, 1),
        "bytes_on_disk": sizes,
        "bytes_per_event": round(sizes["run_event"] / max(1, counts["run_event"]), 1),
    }


async def _copy(
    conn: asyncpg.Connection, table: str, rows: list[tuple[Any, ...]], counts: dict[str, int]
) -> None:
    if rows:
        await conn.copy_records_to_table(table, records=rows, columns=COLUMNS[table])
        counts[table] += len(rows)
