"""The `history` bench scenario's preload (bench/tether_bench/history.py), at a small size, into a
fresh database: every table holds what was asked, each run's log is dense from 1 to its
last_sequence and decodes as the runtime's own events (run id and sequence stamped), and each
waiting run ends on the interrupt its pending row names."""

from __future__ import annotations

import sys
from pathlib import Path

import asyncpg
import pytest
from tether.runtime.v1.events_pb2 import RunEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from tether_bench import history, stack  # noqa: E402


@pytest.mark.timeout(180)
async def test_preload_writes_a_consistent_history(admin_dsn: str) -> None:
    dsn, _ = await stack.create_database(admin_dsn)
    try:
        # 7 events per run and one run with 8: the remainder lands on the first runs
        info = await history.preload(dsn, {"runs": 300, "events": 2101, "waiting": 30})
        conn = await asyncpg.connect(dsn)
        try:
            assert info["run_rows"] == 300 and info["run_event_rows"] == 2101
            assert await conn.fetchval("SELECT count(*) FROM run WHERE id LIKE 'hrun%'") == 300
            assert (
                await conn.fetchval("SELECT count(*) FROM run_event WHERE run_id LIKE 'hrun%'")
                == 2101
            )
            pending = await conn.fetch(
                "SELECT i.id, i.run_id, r.status FROM interrupt i JOIN run r ON r.id = i.run_id "
                "WHERE i.status = 'pending' AND i.run_id LIKE 'hrun%'"
            )
            assert len(pending) == 30 and {p["status"] for p in pending} == {"interrupted"}
            assert (
                await conn.fetchval(
                    "SELECT count(*) FROM run WHERE id LIKE 'hrun%' AND status = 'completed'"
                )
                == 270
            )
            runs = await conn.fetch("SELECT id, last_sequence FROM run WHERE id LIKE 'hrun%'")
            rows = await conn.fetch(
                "SELECT run_id, sequence, type, data FROM run_event WHERE run_id LIKE 'hrun%' "
                "ORDER BY run_id, sequence"
            )
        finally:
            await conn.close()
    finally:
        await stack.drop_database(admin_dsn, dsn)
    by_run: dict[str, list[RunEvent]] = {}
    for r in rows:
        ev = RunEvent.FromString(r["data"])
        assert (ev.run_id, ev.sequence, ev.WhichOneof("event")) == (
            r["run_id"],
            r["sequence"],
            r["type"],
        )
        by_run.setdefault(r["run_id"], []).append(ev)
    for run in runs:
        seqs = [e.sequence for e in by_run[run["id"]]]
        assert seqs == list(range(1, run["last_sequence"] + 1)), run["id"]
    assert sorted(len(v) for v in by_run.values())[-1:] == [8]
    waiting = {p["run_id"]: p["id"] for p in pending}
    for run_id, evs in by_run.items():
        assert evs[0].WhichOneof("event") == "run_started"
        if run_id in waiting:
            assert evs[-1].interrupt.interrupt_id == waiting[run_id]
        else:
            assert evs[-1].WhichOneof("event") == "done"
