"""A/B of what partitioning run_event (migration 0019) touches, on one database, alternating: the
workers' fenced append statement (run_append, migration 0020, `runs` runs one event each
per statement, as the fan-out writes them) and a 10,000-event replay (event_log.read_after pages),
each against the partitioned `run_event` and against a plain table of the same shape. Postgres
only, no runtime process, so it is far less noisy than `make bench` on a shared machine.

    PYTHONPATH=bench uv run --frozen python -m tether_bench.event_log_ab [--rounds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, run_admission
from tether_runtime.store.db import create_pool
from tether_runtime.store.migrations import migrate

PLAIN = "run_event_plain"


def _with_db(dsn: str, name: str) -> str:
    u = urlsplit(dsn)
    return urlunsplit((u.scheme, u.netloc, "/" + name, u.query, u.fragment))


async def _runs(conn: Any, n: int) -> list[str]:
    conv = (await conversations.create(conn, "bench", "ab")).id
    out = []
    for _ in range(n):
        run_id = new_id("run")
        ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conv)])
        await run_admission.start_parallel(
            conn, run_id, conv, "bench", new_id("msg"), "ab", "opspilot", {}, (kind, data), {}
        )
        out.append(run_id)
    # Held by a worker of epoch 1, as the fenced append expects.
    await conn.execute(
        "UPDATE run SET status = 'running', lease_epoch = 1 WHERE id = ANY($1::text[])", out
    )
    return out


async def _appends(conn: Any, runs: list[str], rounds: int) -> dict[str, list[float]]:
    sql = {
        "partitioned": event_log._APPEND_AS_LEASE_HOLDERS,
        "plain": event_log._APPEND_AS_LEASE_HOLDERS.replace("run_append(", "run_append_plain("),
    }
    last = dict.fromkeys(runs, 1)
    times: dict[str, list[float]] = {k: [] for k in sql}
    for i in range(rounds):
        for name in sql if i % 2 == 0 else reversed(list(sql)):
            rows = [(r, last[r] + 1, "text_delta", ev.text_delta("msg_ab", "word ")) for r in runs]
            t0 = time.perf_counter()
            for r, seq, _, e in rows:
                e.run_id, e.sequence = r, seq
            await conn.fetch(
                sql[name],
                runs,
                [1] * len(runs),
                [last[r] for r in runs],
                [last[r] + 1 for r in runs],
                [0] * len(runs),
                [r for r, *_ in rows],
                [s for _, s, *_ in rows],
                [t for *_, t, _ in rows],
                [e.SerializeToString() for *_, e in rows],
                [None] * len(runs),
                [False] * len(runs),
                *([] for _ in range(5)),  # no read claims
                [None] * len(runs),  # no run ends
                *([] for _ in range(15)),  # no finishes, facts, answers, webhook deliveries
                *([] for _ in range(2)),  # no read claims' grants
            )
            times[name].append(time.perf_counter() - t0)
            for r in runs:
                last[r] += 1
    return times


async def _inserts(conn: Any, runs: list[str], rounds: int) -> dict[str, list[float]]:
    """The INSERT alone (no fence): where partitioning's tuple routing would show."""
    sql = {
        name: f"INSERT INTO {table} (run_id, sequence, type, data) "
        "SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[])"
        for name, table in (("partitioned", "run_event"), ("plain", PLAIN))
    }
    data = ev.text_delta("msg_ab", "word ").SerializeToString()
    times: dict[str, list[float]] = {k: [] for k in sql}
    for i in range(rounds):
        seq = 1_000_000 + i
        for name in sql if i % 2 == 0 else reversed(list(sql)):
            t0 = time.perf_counter()
            await conn.execute(
                sql[name], runs, [seq] * len(runs), ["text_delta"] * len(runs), [data] * len(runs)
            )
            times[name].append(time.perf_counter() - t0)
    return times


async def _replays(conn: Any, run_id: str, reps: int) -> dict[str, list[float]]:
    queries = {
        "partitioned": "SELECT sequence, data FROM run_event WHERE run_id = $1 AND sequence > $2 "
        "ORDER BY sequence LIMIT $3",
        "plain": f"SELECT sequence, data FROM {PLAIN} WHERE run_id = $1 AND sequence > $2 "
        "ORDER BY sequence LIMIT $3",
    }
    times: dict[str, list[float]] = {k: [] for k in queries}
    for i in range(reps):
        for name in queries if i % 2 == 0 else reversed(list(queries)):
            t0 = time.perf_counter()
            after = 0
            while True:
                rows = await conn.fetch(queries[name], run_id, after, 2000)
                if not rows:
                    break
                after = rows[-1]["sequence"]
            times[name].append(time.perf_counter() - t0)
    return times


def _summary(ts: list[float], events: int) -> dict[str, float]:
    ts = sorted(ts)
    return {
        "median_ms": round(statistics.median(ts) * 1000, 3),
        "p99_ms": round(ts[int(len(ts) * 0.99) - 1] * 1000, 3),
        "events_per_s": round(events / statistics.median(ts), 1),
    }


async def main(admin: str, rounds: int, runs: int) -> dict[str, Any]:
    name = "tether_ab_" + secrets.token_hex(4)
    root = await asyncpg.connect(admin)
    await root.execute(f'CREATE DATABASE "{name}"')
    dsn = _with_db(admin, name)
    try:
        await migrate(dsn)
        pool = await create_pool(dsn, min_size=1, max_size=1)
        async with pool.acquire() as conn:
            await conn.execute(
                f"CREATE TABLE {PLAIN} (LIKE run_event INCLUDING DEFAULTS, "
                "PRIMARY KEY (run_id, sequence))"
            )
            # The fenced append the workers call (the function run_append, migrations 0020 and
            # 0023: its overload with the most parameters) writing the plain table.
            body = await conn.fetchval(
                "SELECT pg_get_functiondef(oid) FROM pg_proc WHERE proname = 'run_append'"
                " ORDER BY pronargs DESC LIMIT 1"
            )
            await conn.execute(
                body.replace("INSERT INTO run_event ", f"INSERT INTO {PLAIN} ").replace(
                    "public.run_append(", "public.run_append_plain("
                )
            )
            ids = await _runs(conn, runs)
            appends = await _appends(conn, ids, rounds)
            inserts = await _inserts(conn, ids, rounds)
            # A finished 10k-event run in both tables, as bench's replay scenario builds it.
            replay = (await _runs(conn, 1))[0]
            events = [ev.text_delta("msg_ab", f"t{i} ") for i in range(10_000)]
            rows = event_log.stamp(replay, 1, events)
            for table in ("run_event", PLAIN):
                await conn.execute(f"DELETE FROM {table} WHERE run_id = $1", replay)
                await conn.copy_records_to_table(
                    table, records=rows, columns=["run_id", "sequence", "type", "data"]
                )
            await conn.execute("ANALYZE")
            replays = await _replays(conn, replay, 40)
        await pool.close()
    finally:
        await root.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await root.close()
    return {
        "append_statement": {k: _summary(v, runs) for k, v in appends.items()},
        "insert_only": {k: _summary(v, runs) for k, v in inserts.items()},
        "append_runs_per_statement": runs,
        "append_statements": rounds,
        "replay_10k": {k: _summary(v, 10_000) for k, v in replays.items()},
        "loadavg_at_end": os.getloadavg(),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--runs", type=int, default=200)
    a = p.parse_args()
    admin = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    print(json.dumps(asyncio.run(main(admin, a.rounds, a.runs)), indent=2))
