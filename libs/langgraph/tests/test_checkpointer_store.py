"""What the conformance suite leaves out: listing across threads and by checkpoint id, the
order of pending writes, versions that never collide across forks, the space given back by
deletes and prunes, prune's refusal on DeltaChannel threads, and the sync methods."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.serde.types import INTERRUPT
from tether_langgraph.checkpointer import TetherCheckpointer


async def _chain(
    saver: TetherCheckpointer, thread_id: str, n: int, *, ns: str = "", **metadata: Any
) -> list[Any]:
    """`n` checkpoints, each the child of the previous, each writing channel `x`."""
    configs: list[Any] = []
    version: str | None = None
    for step in range(n):
        config = generate_config(thread_id, checkpoint_ns=ns)
        if configs:
            config["configurable"]["checkpoint_id"] = configs[-1]["configurable"]["checkpoint_id"]
        version = saver.get_next_version(version, None)
        checkpoint = generate_checkpoint(
            channel_values={"x": f"value {step}"}, channel_versions={"x": version}
        )
        meta = generate_metadata(step=step, **metadata)
        configs.append(await saver.aput(config, checkpoint, meta, {"x": version}))
    return configs


async def _count(pool: asyncpg.Pool, table: str, thread_id: str) -> int:
    async with pool.acquire() as conn:
        return int(
            await conn.fetchval(f"SELECT count(*) FROM {table} WHERE thread_id = $1", thread_id)
        )


async def test_list_across_threads_newest_first_with_limit_before_and_id(
    pool: asyncpg.Pool,
) -> None:
    saver = TetherCheckpointer(pool)
    tag = uuid.uuid4().hex
    a = await _chain(saver, f"a-{tag}", 3, tag=tag)
    b = await _chain(saver, f"b-{tag}", 2, tag=tag)
    ids = lambda configs: [c["configurable"]["checkpoint_id"] for c in configs]  # noqa: E731
    every = sorted(ids(a) + ids(b), reverse=True)

    found = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(None)]
    assert [i for i in found if i in every] == every  # all threads, newest first

    mine = {"tag": tag}
    assert [t.checkpoint["id"] async for t in saver.alist(None, filter=mine)] == every
    assert [t.checkpoint["id"] async for t in saver.alist(None, filter=mine, limit=2)] == every[:2]
    older = [t.checkpoint["id"] async for t in saver.alist(None, filter=mine, before=a[-1])]
    assert older == [i for i in every if i < a[-1]["configurable"]["checkpoint_id"]]

    (one,) = [t async for t in saver.alist(a[1])]  # a config naming a checkpoint: that one
    assert one.config == a[1] and one.parent_config == a[0]
    assert one.checkpoint["channel_values"] == {"x": "value 1"}
    assert [t async for t in saver.alist(generate_config(f"a-{tag}"), limit=0)] == []


async def test_pending_writes_in_task_path_order_special_ones_rewritten(
    pool: asyncpg.Pool,
) -> None:
    saver = TetherCheckpointer(pool)
    thread_id = uuid.uuid4().hex
    (config,) = await _chain(saver, thread_id, 1)
    await saver.aput_writes(config, [("x", "b1"), ("y", "b2")], "task-b", task_path="~1")
    await saver.aput_writes(config, [("x", "a1")], "task-a", task_path="~2")
    await saver.aput_writes(config, [("x", "again")], "task-b", task_path="~1")  # kept: b1
    await saver.aput_writes(config, [(INTERRUPT, {"q": 1})], "task-c", task_path="~0")
    await saver.aput_writes(config, [(INTERRUPT, {"q": 2})], "task-c", task_path="~0")
    tup = await saver.aget_tuple(config)
    assert tup is not None
    assert tup.pending_writes == [
        ("task-c", INTERRUPT, {"q": 2}),
        ("task-b", "x", "b1"),
        ("task-b", "y", "b2"),
        ("task-a", "x", "a1"),
    ]
    async with pool.acquire() as conn:
        idx = await conn.fetchval(
            "SELECT idx FROM langgraph_checkpoint_write WHERE thread_id = $1 AND channel = $2",
            thread_id,
            INTERRUPT,
        )
    assert idx == WRITES_IDX_MAP[INTERRUPT]


async def test_two_forks_of_one_checkpoint_keep_their_own_values(pool: asyncpg.Pool) -> None:
    """Both forks bump `x` from the same version: the random tail keeps their blobs apart."""
    saver = TetherCheckpointer(pool)
    thread_id = uuid.uuid4().hex
    (root,) = await _chain(saver, thread_id, 1)
    base = (await saver.aget_tuple(root)).checkpoint["channel_versions"]["x"]  # type: ignore[union-attr]
    forks = []
    for value in ("left", "right"):
        config = generate_config(thread_id, checkpoint_id=root["configurable"]["checkpoint_id"])
        version = saver.get_next_version(base, None)
        assert version > base and version.split(".")[0] == f"{2:032}"
        cp = generate_checkpoint(channel_values={"x": value}, channel_versions={"x": version})
        forks.append(await saver.aput(config, cp, generate_metadata(step=1), {"x": version}))
    values = [(await saver.aget_tuple(f)).checkpoint["channel_values"] for f in forks]  # type: ignore[union-attr]
    assert values == [{"x": "left"}, {"x": "right"}]


async def test_deletes_and_prunes_give_back_blobs_and_writes(pool: asyncpg.Pool) -> None:
    saver = TetherCheckpointer(pool)
    thread_id = uuid.uuid4().hex
    configs = await _chain(saver, thread_id, 3)
    for config in configs:
        await saver.aput_writes(config, [("x", "w")], "task")
    assert await _count(pool, "langgraph_checkpoint_blob", thread_id) == 3

    await saver.aprune([thread_id], strategy="keep_latest")
    assert [t.config async for t in saver.alist(generate_config(thread_id))] == [configs[-1]]
    assert await _count(pool, "langgraph_checkpoint_blob", thread_id) == 1
    assert await _count(pool, "langgraph_checkpoint_write", thread_id) == 1
    latest = await saver.aget_tuple(generate_config(thread_id))
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": "value 2"}

    run_thread = uuid.uuid4().hex
    await _chain(saver, run_thread, 2, run_id="lg-run-1")
    await saver.adelete_for_runs(["lg-run-1"])
    for table in ("langgraph_checkpoint", "langgraph_checkpoint_blob"):
        assert await _count(pool, table, run_thread) == 0


async def test_prune_refuses_delta_channel_threads_and_unknown_strategies(
    pool: asyncpg.Pool,
) -> None:
    saver = TetherCheckpointer(pool)
    thread_id = uuid.uuid4().hex
    await _chain(saver, thread_id, 2, counters_since_delta_snapshot={"x": [1, 1]})
    with pytest.raises(ValueError, match="DeltaChannel"):
        await saver.aprune([thread_id], strategy="keep_latest")
    with pytest.raises(ValueError, match="prune strategy"):
        await saver.aprune([thread_id], strategy="keep_some")
    assert await _count(pool, "langgraph_checkpoint", thread_id) == 2


async def test_sync_methods_run_on_the_savers_loop_from_other_threads(
    pool: asyncpg.Pool,
) -> None:
    saver = TetherCheckpointer(pool)
    thread_id = uuid.uuid4().hex
    (config,) = await _chain(saver, thread_id, 1)

    def elsewhere() -> Any:
        saver.put_writes(config, [("x", "sync")], "task")
        return saver.get_tuple(config), list(saver.list(generate_config(thread_id)))

    tup, listed = await asyncio.to_thread(elsewhere)
    assert tup.pending_writes == [("task", "x", "sync")]
    assert [t.config for t in listed] == [config]
    with pytest.raises(asyncio.InvalidStateError, match="async"):
        saver.get_tuple(config)  # on the loop's own thread it would block the loop
