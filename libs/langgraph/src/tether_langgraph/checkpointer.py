"""LangGraph's checkpointer on Tether's Postgres, every write fenced by the run's lease epoch.

Interface (agreed with the LangGraph agent kind, issue #19):

    from tether_langgraph.checkpointer import LeaseLost, RunFence, TetherCheckpointer

    saver = TetherCheckpointer(pool)                             # unfenced: tools, conformance
    saver = TetherCheckpointer(pool, fence=RunFence(run_id, epoch))  # every write fenced
    run_saver = saver.fenced(run_id, epoch)                      # a fenced copy (same pool, serde)
    execution_saver = saver.fenced(run_id, epoch, sole_writer=True)  # and it keeps its last read

    # or one process-wide saver, fenced per call through the run's config:
    config = {"configurable": {"thread_id": conversation_id, "checkpoint_ns": "",
                               "tether_run_id": run_id, "tether_epoch": epoch}}
    async for chunk in graph.astream(inputs, config, ...): ...

- `pool`: an asyncpg pool on Tether's database (the runtime's own pool works: the saver passes
  JSON as text, so the pool's codecs do not matter). Each write takes a connection of its own
  for one transaction: do not call the saver while holding, on another connection, a
  transaction that updated the `run` row (the fence check would wait for it).
- `thread_id` is Tether's conversation id; `checkpoint_ns` LangGraph's namespace ("" for the
  root graph, "node:task" for subgraphs).
- The fence: `config["configurable"]["tether_run_id"]` and `["tether_epoch"]` (both or neither;
  they win over the constructor's), else the constructor's `fence`, else none. A fenced write
  (aput, aput_writes, and the maintenance calls: adelete_thread, adelete_for_runs,
  acopy_thread, aprune) runs in one transaction that first locks the run row FOR SHARE where
  `lease_epoch` is the fence's epoch (aput and aput_writes, a graph's writes at every step, are
  one statement each, the lock in a CTE: one round trip); if it is not (a takeover bumped it),
  it raises `LeaseLost` (`.run_id`, `.epoch`) and writes nothing; the runtime's graph driver treats it as any lost
  lease (`except LeaseLost as e: raise event_log.Fenced(e.run_id) from e`). The share lock holds
  off a takeover's claim until the write commits. The epoch alone is checked, as the runtime's
  own `runs.save_checkpoint` does: the holder may still write after it set the run
  `interrupted` (a new claim, the only thing that moves the epoch, fences it off).
- Run graphs with `durability="sync"`: LangGraph's default ("async") writes a checkpoint in the
  background while the next step's nodes run, so a zombie would run them before its refused write
  surfaced; with "sync" the first refused write stops the graph before any further node.
- Reads (aget_tuple, alist) are never fenced.
- `sole_writer=True` (the runtime's saver for one execution of a run, which holds the run's
  lease, so that nobody else writes its thread meanwhile): the saver keeps the row of its last
  `aget_tuple` and answers the next one of the same checkpoint (the thread's newest, or one by
  id) from it when it wrote nothing between; any write drops it. The graph driver reads the
  state to decide how to go on, and LangGraph's stream reads the same checkpoint again first
  thing: one statement instead of two. The row is decoded again, so no caller shares objects.
- Sync methods (get_tuple, list, put, ...) delegate to the async ones on the loop the saver was
  created on; called from that loop's own thread they raise (use the async methods there).

Tables (migration 0008_langgraph_checkpoints.sql): `langgraph_checkpoint` (one row per
checkpoint, the checkpoint without its channel values, metadata as jsonb, the fencing run and
epoch), `langgraph_checkpoint_blob` (channel values, one row per channel version, shared by the
checkpoints that did not change the channel), `langgraph_checkpoint_write` (pending writes).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import asyncpg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from tether_langgraph import _sql
from tether_langgraph.fence import LeaseLost, RunFence, fence_of

__all__ = ["LeaseLost", "RunFence", "TetherCheckpointer"]

T = TypeVar("T")

PRUNE_STRATEGIES = ("keep_latest", "delete")


class TetherCheckpointer(BaseCheckpointSaver[str]):
    """A LangGraph `BaseCheckpointSaver` on Tether's Postgres (see the module's docstring)."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        fence: RunFence | None = None,
        serde: SerializerProtocol | None = None,
        sole_writer: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self.pool = pool
        self.fence = fence
        self.sole_writer = sole_writer
        # (thread, namespace, checkpoint id or None for the newest) -> the row last read
        self._kept: tuple[tuple[str, str, str | None], asyncpg.Record | None] | None = None
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    def fenced(self, run_id: str, epoch: int, *, sole_writer: bool = False) -> TetherCheckpointer:
        """A saver on the same pool and serializer whose writes are fenced by this run's lease;
        `sole_writer`: it keeps its last read (the module's docstring)."""
        clone = TetherCheckpointer(
            self.pool, fence=RunFence(run_id, epoch), serde=self.serde, sole_writer=sole_writer
        )
        clone.loop = self.loop
        return clone

    # -- reads --------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        key = (
            configurable["thread_id"],
            configurable.get("checkpoint_ns", ""),
            get_checkpoint_id(config) or None,
        )
        kept, self._kept = self._kept, None
        if kept is not None and kept[0] == key:
            row = kept[1]
        else:
            row = await self._read(*key)
            if self.sole_writer:
                self._kept = (key, row)
        return None if row is None else self._tuple_of(row)

    async def _read(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> asyncpg.Record | None:
        async with self.pool.acquire() as conn:
            if checkpoint_id:
                return await conn.fetchrow(
                    _sql.SELECT_TUPLES
                    + "WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 AND c.checkpoint_id = $3",
                    thread_id,
                    checkpoint_ns,
                    checkpoint_id,
                )
            return await conn.fetchrow(
                _sql.SELECT_TUPLES + "WHERE c.thread_id = $1 AND c.checkpoint_ns = $2 "
                "ORDER BY c.checkpoint_id DESC LIMIT 1",
                thread_id,
                checkpoint_ns,
            )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Newest first. `config` narrows to a thread (and to a namespace when it names one,
        "" being the root's, and to one checkpoint when it names one); `filter` to checkpoints
        whose metadata contains it; `before` to checkpoints older than its checkpoint id."""
        wheres: list[str] = []
        args: list[Any] = []

        def where(condition: str, value: Any) -> None:
            args.append(value)
            wheres.append(condition.format(f"${len(args)}"))

        if config is not None:
            configurable = config["configurable"]
            where("c.thread_id = {}", configurable["thread_id"])
            if configurable.get("checkpoint_ns") is not None:
                where("c.checkpoint_ns = {}", configurable["checkpoint_ns"])
            if checkpoint_id := get_checkpoint_id(config):
                where("c.checkpoint_id = {}", checkpoint_id)
        if filter:
            where("c.metadata @> {}::text::jsonb", json.dumps(filter))
        if before is not None and (before_id := get_checkpoint_id(before)):
            where("c.checkpoint_id < {}", before_id)
        query = _sql.SELECT_TUPLES
        if wheres:
            query += "WHERE " + " AND ".join(wheres)
        query += " ORDER BY c.checkpoint_id DESC"
        if limit is not None:
            args.append(int(limit))
            query += f" LIMIT ${len(args)}"
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(query, *args)
        for row in rows:
            yield self._tuple_of(row)

    def _tuple_of(self, row: asyncpg.Record) -> CheckpointTuple:
        thread_id, checkpoint_ns = row["thread_id"], row["checkpoint_ns"]
        stored = json.loads(row["checkpoint"])
        values = {
            channel: self.serde.loads_typed((type_, blob))
            for channel, type_, blob in row["channel_values"] or ()
        }
        writes = [
            (task_id, channel, self.serde.loads_typed((type_, blob)))
            for task_id, channel, type_, blob in row["pending_writes"] or ()
        ]
        parent_id = row["parent_checkpoint_id"]
        return CheckpointTuple(
            config=_config_of(thread_id, checkpoint_ns, row["checkpoint_id"]),
            checkpoint=cast(Checkpoint, {**stored, "channel_values": values}),
            metadata=json.loads(row["metadata"]),
            parent_config=_config_of(thread_id, checkpoint_ns, parent_id) if parent_id else None,
            pending_writes=writes,
        )

    # -- fenced writes ------------------------------------------------------------------------

    async def _write(
        self, fence: RunFence | None, fn: Callable[[asyncpg.Connection], Awaitable[T]]
    ) -> T:
        """`fn(conn)` in one transaction, after the fence (if any) holds: all of it or nothing."""
        self._kept = None
        async with self.pool.acquire() as conn, conn.transaction():
            if fence is not None:
                await fence.hold(conn)
            return await fn(conn)

    async def _fenced_write(self, fence: RunFence | None, statement: str, *args: Any) -> None:
        """One of _sql's single-statement writes (PUT_*, *_WRITES_*): it writes only while the
        fence holds and answers whether it did; LeaseLost when it did not (nothing written)."""
        self._kept = None
        async with self.pool.acquire() as conn:
            held = await conn.fetchval(statement, *args)
        if fence is not None and not held:
            raise LeaseLost(fence.run_id, fence.epoch)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store the checkpoint; its channel values as blobs, one per channel in
        `new_versions` (a channel there without a value is stored as empty)."""
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        fence = fence_of(configurable, self.fence)
        values = checkpoint["channel_values"]
        stored = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        channels, versions, types, blobs = [], [], [], []
        for channel, version in new_versions.items():
            type_, blob = (
                self.serde.dumps_typed(values[channel]) if channel in values else ("empty", None)
            )
            channels.append(channel)
            versions.append(str(version))
            types.append(type_)
            blobs.append(blob)
        encoded_checkpoint = json.dumps(stored)
        encoded_metadata = json.dumps(get_serializable_checkpoint_metadata(config, metadata))

        await self._fenced_write(
            fence,
            _sql.PUT_FENCED if fence else _sql.PUT_UNFENCED,
            thread_id,
            checkpoint_ns,
            channels,
            versions,
            types,
            blobs,
            checkpoint["id"],
            configurable.get("checkpoint_id"),
            encoded_checkpoint,
            encoded_metadata,
            fence.run_id if fence else None,
            fence.epoch if fence else None,
        )
        return _config_of(thread_id, checkpoint_ns, checkpoint["id"])

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        fence = fence_of(configurable, self.fence)
        idxs, channels, types, blobs = [], [], [], []
        for i, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            idxs.append(WRITES_IDX_MAP.get(channel, i))
            channels.append(channel)
            types.append(type_)
            blobs.append(blob)
        if not writes:
            return
        special = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        if fence is None:
            statement = _sql.UPSERT_WRITES_UNFENCED if special else _sql.INSERT_WRITES_UNFENCED
        else:
            statement = _sql.UPSERT_WRITES_FENCED if special else _sql.INSERT_WRITES_FENCED
        args: list[Any] = [
            configurable["thread_id"],
            configurable.get("checkpoint_ns", ""),
            configurable["checkpoint_id"],
            task_id,
            task_path,
            idxs,
            channels,
            types,
            blobs,
        ]
        if fence is not None:
            args += [fence.run_id, fence.epoch]
        await self._fenced_write(fence, statement, *args)

    async def adelete_thread(self, thread_id: str) -> None:
        async def delete(conn: asyncpg.Connection) -> None:
            for statement in _sql.DELETE_THREADS:
                await conn.execute(statement, [thread_id])

        await self._write(self.fence, delete)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints LangGraph's runs `run_ids` made (metadata `run_id`), their
        writes, and the blobs no remaining checkpoint names."""

        async def delete(conn: asyncpg.Connection) -> None:
            rows = await conn.fetch(_sql.DELETE_FOR_RUNS, list(run_ids))
            threads = sorted({r["thread_id"] for r in rows})
            if threads:
                for statement in _sql.DELETE_ORPHANS:
                    await conn.execute(statement, threads)

        if run_ids:
            await self._write(self.fence, delete)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (the whole parent chain), blob and write of a thread."""

        async def copy(conn: asyncpg.Connection) -> None:
            for statement in _sql.COPY_THREAD:
                await conn.execute(statement, source_thread_id, target_thread_id)

        await self._write(self.fence, copy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep the newest checkpoint of each namespace (its writes and blobs);
        refused (ValueError, nothing deleted) for a thread whose graph uses DeltaChannel, whose
        newest checkpoint may need its ancestors. `delete`: delete the threads."""
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"prune strategy {strategy!r}: expected one of {PRUNE_STRATEGIES}")
        threads = list(thread_ids)

        async def prune(conn: asyncpg.Connection) -> None:
            if strategy == "delete":
                for statement in _sql.DELETE_THREADS:
                    await conn.execute(statement, threads)
                return
            delta = [r["thread_id"] for r in await conn.fetch(_sql.DELTA_THREADS, threads)]
            if delta:
                raise ValueError(
                    f"threads {delta} use DeltaChannel: keep_latest would cut the history their "
                    "newest checkpoint is rebuilt from; nothing was pruned"
                )
            await conn.execute(_sql.DELETE_OLDER, threads)
            for statement in _sql.DELETE_ORPHANS:
                await conn.execute(statement, threads)

        if threads:
            await self._write(self.fence, prune)

    def get_next_version(self, current: str | int | None, channel: None) -> str:
        """Increasing versions with a random tail, as LangGraph's Postgres saver makes them: two
        branches forked from one checkpoint never share a blob key with different values."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- sync: the async methods, run on the saver's loop from another thread -----------------

    def _on_loop(self, make: Callable[[], Awaitable[T]]) -> T:
        if self.loop is None:
            raise RuntimeError(
                "TetherCheckpointer was created outside an event loop: use its async methods"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            raise asyncio.InvalidStateError(
                "TetherCheckpointer's sync methods would block its own event loop: use the async "
                "ones (ainvoke, astream, aget_state) on this loop"
            )

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._on_loop(lambda: self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            found = self.alist(config, filter=filter, before=before, limit=limit)
            return [t async for t in found]

        yield from self._on_loop(collect)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._on_loop(lambda: self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._on_loop(lambda: self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._on_loop(lambda: self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._on_loop(lambda: self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._on_loop(lambda: self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._on_loop(lambda: self.aprune(thread_ids, strategy=strategy))


def _config_of(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
        }
    }
