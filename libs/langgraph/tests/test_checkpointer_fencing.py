"""Every checkpoint write is fenced by the run's lease epoch (DESIGN invariant 2): after a
takeover bumps the epoch, the old worker's saver raises LeaseLost and writes nothing, whether
the fence comes from the saver or from the graph's config; the new holder writes on."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from approval_graph import build
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from run_leases import claim, queued_run, take_over
from tether_langgraph.checkpointer import LeaseLost, RunFence, TetherCheckpointer
from tether_runtime.store import runs

TABLES = ("langgraph_checkpoint", "langgraph_checkpoint_blob", "langgraph_checkpoint_write")


async def _rows(conn: asyncpg.Connection, thread_id: str) -> dict[str, int]:
    return {
        t: int(await conn.fetchval(f"SELECT count(*) FROM {t} WHERE thread_id = $1", thread_id))
        for t in TABLES
    }


async def _put(saver: TetherCheckpointer, thread_id: str, parent: Any = None) -> Any:
    config = generate_config(thread_id)
    if parent is not None:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    checkpoint = generate_checkpoint(channel_values={"messages": ["hi"]})
    checkpoint["channel_versions"] = {"messages": saver.get_next_version(None, None)}
    return await saver.aput(
        config, checkpoint, generate_metadata(), dict(checkpoint["channel_versions"])
    )


async def test_a_stale_epoch_writes_nothing_and_raises(private_pool: asyncpg.Pool) -> None:
    async with private_pool.acquire() as conn:
        run_id, thread_id = await queued_run(conn)
        first_epoch = await claim(conn, "worker-1")
    zombie = TetherCheckpointer(private_pool).fenced(run_id, first_epoch)
    stored = await _put(zombie, thread_id)
    await zombie.aput_writes(stored, [("messages", "pending")], "task-1")

    async with private_pool.acquire() as conn:
        second_epoch = await take_over(conn, run_id, "worker-2")
        assert second_epoch == first_epoch + 1
        before = await _rows(conn, thread_id)
    assert before == {t: 1 for t in TABLES}

    with pytest.raises(LeaseLost) as lost:
        await _put(zombie, thread_id, parent=stored)
    assert (lost.value.run_id, lost.value.epoch) == (run_id, first_epoch)
    assert "no longer the run's" in str(lost.value)
    with pytest.raises(LeaseLost):
        await zombie.aput_writes(stored, [("messages", "late")], "task-2")
    with pytest.raises(LeaseLost):
        await zombie.adelete_thread(thread_id)
    with pytest.raises(LeaseLost):
        await zombie.aprune([thread_id], strategy="delete")
    async with private_pool.acquire() as conn:
        assert await _rows(conn, thread_id) == before
    latest = await zombie.aget_tuple(generate_config(thread_id))  # reads are not fenced
    assert latest is not None and latest.config == stored

    holder = zombie.fenced(run_id, second_epoch)
    newer = await _put(holder, thread_id, parent=stored)
    async with private_pool.acquire() as conn:
        written = await conn.fetchrow(
            "SELECT tether_run_id, tether_epoch FROM langgraph_checkpoint "
            "WHERE thread_id = $1 AND checkpoint_id = $2",
            thread_id,
            newer["configurable"]["checkpoint_id"],
        )
    assert tuple(written) == (run_id, second_epoch)


async def test_the_fence_in_the_graph_config_guards_a_real_graph(
    private_pool: asyncpg.Pool,
) -> None:
    """One process-wide saver, fenced per run by `tether_run_id` / `tether_epoch` in the
    config LangGraph hands to every checkpoint write."""
    async with private_pool.acquire() as conn:
        run_id, thread_id = await queued_run(conn)
        first_epoch = await claim(conn, "worker-1")
        second_epoch = await take_over(conn, run_id, "worker-2")
    graph = build(TetherCheckpointer(private_pool))

    def config(epoch: int) -> Any:
        fence = {"tether_run_id": run_id, "tether_epoch": epoch}
        return {"configurable": {"thread_id": thread_id, **fence}}

    with pytest.raises(LeaseLost):
        await graph.ainvoke({"request": "web-1"}, config(first_epoch))
    async with private_pool.acquire() as conn:
        assert await _rows(conn, thread_id) == {t: 0 for t in TABLES}

    result = await graph.ainvoke({"request": "web-1"}, config(second_epoch))
    assert [i.value["kind"] for i in result["__interrupt__"]] == ["confirm_action"]
    async with private_pool.acquire() as conn:
        epochs = await conn.fetch(
            "SELECT DISTINCT tether_run_id, tether_epoch FROM langgraph_checkpoint "
            "WHERE thread_id = $1",
            thread_id,
        )
        assert [tuple(r) for r in epochs] == [(run_id, second_epoch)]
        written = await _rows(conn, thread_id)
    assert written["langgraph_checkpoint"] == 3  # input, after START, after draft
    assert written["langgraph_checkpoint_write"] > 0  # act's interrupt, pending

    # The zombie cannot resume it either: its resume writes nothing.
    with pytest.raises(LeaseLost):
        await graph.ainvoke(Command(resume="approved"), config(first_epoch))
    async with private_pool.acquire() as conn:
        assert await _rows(conn, thread_id) == written


async def test_a_write_in_flight_holds_off_the_takeover(private_pool: asyncpg.Pool) -> None:
    """The fence's share lock lasts until the write commits: a claim meanwhile skips the run
    (FOR UPDATE SKIP LOCKED), so no takeover commits between the check and the write."""
    async with private_pool.acquire() as conn:
        run_id, _ = await queued_run(conn)
        epoch = await claim(conn, "worker-1")
        await conn.execute(
            "UPDATE run SET lease_expires_at = now() - interval '1 second' WHERE id = $1", run_id
        )
    async with private_pool.acquire() as writer, private_pool.acquire() as other:
        async with writer.transaction():
            await RunFence(run_id, epoch).hold(writer)
            assert await runs.claim(other, "worker-2", 30.0) is None
        assert await claim(other, "worker-2") == epoch + 1


@pytest.mark.parametrize(
    "fence",
    [
        {"tether_run_id": "run_x"},
        {"tether_epoch": 3},
        {"tether_run_id": "run_x", "tether_epoch": "3"},
        {"tether_run_id": "", "tether_epoch": 3},
    ],
)
async def test_a_malformed_fence_is_refused_and_writes_nothing(
    pool: asyncpg.Pool, fence: dict[str, Any]
) -> None:
    thread_id = f"conv_{uuid.uuid4().hex}"
    config = generate_config(thread_id)
    config["configurable"].update(fence)
    with pytest.raises(ValueError, match="tether_"):
        await TetherCheckpointer(pool).aput(config, generate_checkpoint(), generate_metadata(), {})
    async with pool.acquire() as conn:
        assert await _rows(conn, thread_id) == {t: 0 for t in TABLES}


async def test_with_sync_durability_a_zombie_runs_no_node(private_pool: asyncpg.Pool) -> None:
    """LangGraph's default durability ("async") writes checkpoints in the background while the
    next nodes run, so a zombie may learn it lost the lease only after running them; with
    durability="sync" (what Tether runs graphs with) the first refused write stops the graph
    before any node."""
    ran: list[str] = []

    def node(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            return {"n": len(ran)}

        return run

    builder = StateGraph(dict)  # type: ignore[type-var]
    builder.add_node("first", node("first"))
    builder.add_node("second", node("second"))
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    async with private_pool.acquire() as conn:
        run_id, thread_id = await queued_run(conn)
        stale = await claim(conn, "worker-1")
        await take_over(conn, run_id, "worker-2")
    graph = builder.compile(checkpointer=TetherCheckpointer(private_pool).fenced(run_id, stale))
    config: Any = {"configurable": {"thread_id": thread_id}}

    with pytest.raises(LeaseLost):
        await graph.ainvoke({"n": 0}, config, durability="sync")
    assert ran == []


async def _waits_on_a_lock(conn: asyncpg.Connection, others: int) -> bool:
    """Whether `others` backends of this database wait on a lock (the write behind a takeover)."""
    n = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    return int(n) >= others


@pytest.mark.parametrize("takeover", ["commits", "rolls back"])
async def test_a_takeover_in_flight_decides_the_one_statement_writes(
    private_pool: asyncpg.Pool, takeover: str
) -> None:
    """aput and aput_writes are one statement each, the fence's share lock in a CTE: a write
    that meets a takeover in flight (the run row updated, not committed) waits for it, then
    writes nothing and raises LeaseLost if the takeover committed (its epoch moved on), or
    writes if it rolled back."""
    async with private_pool.acquire() as conn:
        run_id, thread_id = await queued_run(conn)
        epoch = await claim(conn, "worker-1")
    saver = TetherCheckpointer(private_pool).fenced(run_id, epoch)
    stored = await _put(saver, thread_id)
    async with private_pool.acquire() as conn:
        before = await _rows(conn, thread_id)
    async with private_pool.acquire() as taker, private_pool.acquire() as watcher:
        tx = taker.transaction()
        await tx.start()
        await taker.execute("UPDATE run SET lease_epoch = lease_epoch + 1 WHERE id = $1", run_id)
        put = asyncio.create_task(_put(saver, thread_id, parent=stored))
        writes = asyncio.create_task(saver.aput_writes(stored, [("messages", "x")], "task-9"))
        for _ in range(200):
            if await _waits_on_a_lock(watcher, 2):
                break
            await asyncio.sleep(0.02)
        assert not put.done() and not writes.done()  # held behind the takeover
        await (tx.commit() if takeover == "commits" else tx.rollback())
        outcomes = await asyncio.gather(put, writes, return_exceptions=True)
    async with private_pool.acquire() as conn:
        after = await _rows(conn, thread_id)
    if takeover == "commits":
        assert all(isinstance(o, LeaseLost) for o in outcomes), outcomes
        assert after == before
    else:
        assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
        assert after == {
            "langgraph_checkpoint": 2,
            "langgraph_checkpoint_blob": 2,
            "langgraph_checkpoint_write": 1,
        }
