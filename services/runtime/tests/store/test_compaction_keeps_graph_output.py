"""Compacting a finished run's checkpoint (store/checkpoint_compaction.py) keeps a graph run's
final state (GetRun's output_json, issue 30) and the run's input, and drops a native run's empty
`output`."""

from __future__ import annotations

from typing import Any

from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.domain.views import RunView
from tether_runtime.engine.checkpoint import Checkpoint
from tether_runtime.store import (
    checkpoint_compaction,
    conversations,
    event_log,
    run_admission,
    runs,
)


async def _finished(conn: Any, output: str, graph_input: dict[str, Any] | None) -> str:
    conv = await conversations.create(conn, "alice", "compaction")
    run_id = new_id("run")
    ((_, _, kind, data),) = event_log.stamp(run_id, 1, [ev.run_started(conv.id)])
    cp = Checkpoint("m1", [{"role": "user", "content": "hi"}], steps=2, output=output).as_dict()
    await run_admission.start(
        conn,
        run_admission.Start(
            run_admission.PARALLEL, run_id, conv.id, "alice", new_id("msg"), "hi", "g", {},
            (kind, data), cp, graph_input,
        ),
    )  # fmt: skip
    await conn.execute("UPDATE run SET status = 'completed' WHERE id = $1", run_id)
    return run_id


async def test_a_graph_runs_output_and_input_outlive_compaction(pool: Any) -> None:
    async with pool.acquire() as conn:
        graph = await _finished(conn, '{"done":true}', {"title": "disk full"})
        native = await _finished(conn, "", None)
        assert await checkpoint_compaction.compact(conn, 0.0) >= 2
        graph_run, native_run = await runs.get(conn, graph), await runs.get(conn, native)
    assert graph_run is not None and native_run is not None
    assert graph_run.checkpoint["compacted"] and "messages" not in graph_run.checkpoint
    assert RunView.of(graph_run).output_json == '{"done":true}'
    assert graph_run.input == {"title": "disk full"} and native_run.input is None
    assert "output" not in native_run.checkpoint and native_run.checkpoint["steps"] == 2
    assert RunView.of(native_run).output_json == ""
