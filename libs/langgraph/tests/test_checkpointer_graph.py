"""A real LangGraph graph on TetherCheckpointer: interrupted in this process, resumed with
`Command(resume=...)` by another process with a saver of its own, which finds the interrupt
and the state in Postgres alone."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest
from approval_graph import build
from tether_langgraph.checkpointer import TetherCheckpointer

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

HERE = Path(__file__).parent


async def test_interrupted_graph_resumes_from_another_process(pool: asyncpg.Pool, dsn: str) -> None:
    thread_id = f"conv_{uuid.uuid4().hex}"
    config = {"configurable": {"thread_id": thread_id}}
    graph = build(TetherCheckpointer(pool))

    first = await graph.ainvoke({"request": "web-1"}, config)
    (pending,) = first["__interrupt__"]
    assert pending.value == {"kind": "confirm_action", "proposal": "restart web-1"}
    assert "answer" not in first

    # What another pod sees before resuming: the graph paused at `act`, with its interrupt.
    state = await build(TetherCheckpointer(pool)).aget_state(config)
    assert state.next == ("act",)
    assert state.values == {"request": "web-1", "proposal": "restart web-1"}
    assert [i.value for i in state.interrupts] == [pending.value]

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(HERE / "approval_graph.py"),
        dsn,
        thread_id,
        "approved",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    final = json.loads(out)
    assert final == {
        "request": "web-1",
        "proposal": "restart web-1",
        "answer": "approved",
        "done": True,
    }

    # And this process, with a new saver, reads the finished thread from Postgres.
    after = await build(TetherCheckpointer(pool)).aget_state(config)
    assert after.next == ()
    assert after.values == final
    history = [s async for s in build(TetherCheckpointer(pool)).aget_state_history(config)]
    assert [s.metadata["step"] for s in history if s.metadata] == [2, 1, 0, -1]
