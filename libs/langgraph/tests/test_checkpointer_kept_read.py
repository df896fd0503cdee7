"""A saver that is its thread's sole writer (the runtime's, for one execution of a run) keeps
the row of its last read: the driver's read of the state and LangGraph's read of the same
checkpoint at the start of the stream cost one statement. Any write drops the row; another
checkpoint is read from Postgres; each answer is decoded afresh (no caller shares objects)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from approval_graph import build
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.types import Command
from tether_langgraph.checkpointer import TetherCheckpointer
from tether_runtime.store.statement_count import COUNTS


def _reads() -> int:
    """The checkpoint reads so far: the only `select`s these tests send (writes are `with`)."""
    return COUNTS.get("select", 0)


async def _put(saver: TetherCheckpointer, thread_id: str, value: str, parent: Any = None) -> Any:
    config = generate_config(thread_id)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    version = saver.get_next_version(None, None)
    checkpoint = generate_checkpoint(channel_values={"x": value}, channel_versions={"x": version})
    return await saver.aput(config, checkpoint, generate_metadata(step=0), {"x": version})


async def test_the_next_read_of_the_same_checkpoint_is_the_kept_row(pool: asyncpg.Pool) -> None:
    thread_id = f"conv_{uuid.uuid4().hex}"
    sole = TetherCheckpointer(pool, sole_writer=True)
    first_config = await _put(sole, thread_id, "one")
    newest = {"configurable": {"thread_id": thread_id}}

    before = _reads()
    first = await sole.aget_tuple(newest)
    again = await sole.aget_tuple(newest)
    assert _reads() - before == 1
    assert first is not None and again is not None
    assert again.checkpoint == first.checkpoint and again.config == first.config
    first.checkpoint["channel_values"]["x"] = "changed by its caller"
    assert again.checkpoint["channel_values"]["x"] == "one"  # decoded afresh

    # Kept for the next read only: a third is read again, as is another checkpoint.
    assert (await sole.aget_tuple(newest)) is not None
    assert _reads() - before == 2
    by_id = await sole.aget_tuple(first_config)
    assert by_id is not None and by_id.checkpoint["id"] == first.checkpoint["id"]
    assert _reads() - before == 3

    # A write drops the kept row: the next read sees the new checkpoint.
    await sole.aget_tuple(newest)
    second_config = await _put(sole, thread_id, "two", parent=first_config)
    latest = await sole.aget_tuple(newest)
    assert latest is not None and latest.config == second_config
    assert latest.checkpoint["channel_values"]["x"] == "two"
    assert _reads() - before == 5
    await sole.aget_tuple(newest)  # the row `latest` read, kept
    assert _reads() - before == 5
    await sole.aput_writes(second_config, [("x", "w")], "task-1")
    written = await sole.aget_tuple(newest)
    assert written is not None and written.pending_writes == [("task-1", "x", "w")]
    assert _reads() - before == 6


async def test_a_saver_that_is_not_the_sole_writer_reads_every_time(pool: asyncpg.Pool) -> None:
    thread_id = f"conv_{uuid.uuid4().hex}"
    saver = TetherCheckpointer(pool)
    await _put(saver, thread_id, "one")
    newest = {"configurable": {"thread_id": thread_id}}
    before = _reads()
    await saver.aget_tuple(newest)
    await saver.aget_tuple(newest)
    assert _reads() - before == 2


async def _resumed(pool: asyncpg.Pool, *, sole_writer: bool) -> tuple[Any, int]:
    """A graph interrupted by one saver, then, as the runtime's driver does, its state read and
    the graph resumed by a saver of the execution: the final state and the reads it took."""
    thread_id = f"conv_{uuid.uuid4().hex}"
    config = {"configurable": {"thread_id": thread_id}}
    await build(TetherCheckpointer(pool)).ainvoke({"request": "web-1"}, config)
    graph = build(TetherCheckpointer(pool, sole_writer=sole_writer))
    before = _reads()
    state = await graph.aget_state(config)
    assert state.next == ("act",)
    final = await graph.ainvoke(Command(resume="approved"), config)
    return final, _reads() - before


async def test_a_resumed_graph_reads_its_checkpoint_once(pool: asyncpg.Pool) -> None:
    every_time, reads = await _resumed(pool, sole_writer=False)
    once, kept = await _resumed(pool, sole_writer=True)
    assert (
        once
        == every_time
        == {
            "request": "web-1",
            "proposal": "restart web-1",
            "answer": "approved",
            "done": True,
        }
    )
    assert kept == reads - 1
