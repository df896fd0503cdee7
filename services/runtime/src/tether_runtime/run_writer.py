"""The one write path of an executing run. Writes queue in order; a single drain task commits
everything queued so far at once, numbered by this lease holder and fenced by its epoch and
position, then publishes it. Text deltas are queued without waiting and go through the
process-wide EventSink (shared with other runs); a batch carrying a state change commits in one
transaction of its own. State changes wait until they are durable. A commit the store cannot take
right now (a restart, a failover) is retried for a while (`_commit_through_outage`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tether_runtime import events as ev
from tether_runtime import metrics
from tether_runtime.bus import EventBus
from tether_runtime.event_sink import EventSink
from tether_runtime.outage import Outage
from tether_runtime.store import event_log, interrupts, outbox, runs
from tether_runtime.store.db import STORE_DOWN, Conn, Pool
from tether_runtime.store.event_log import LeaseAppend, ReadClaim

Apply = Callable[[Conn], Awaitable[None]]
MAX_QUEUED_EVENTS = 2000  # past this, emitters wait for the drain: memory stays bounded


@dataclass(frozen=True)
class SaveCheckpoint:
    """The state change that saves the run's own checkpoint (encoded JSON). A commit whose only
    state changes are these needs no transaction of its own: the shared statement saves the
    checkpoint with the events, fenced the same way (event_log.append_as_lease_holders)."""

    run_id: str
    epoch: int
    encoded: str
    reset_streamed: bool

    async def __call__(self, conn: Conn) -> None:
        await runs.save_checkpoint(
            conn, self.run_id, self.epoch, self.encoded, reset_streamed=self.reset_streamed
        )


@dataclass(frozen=True)
class ThenSave:
    """A state change that leaves the run's checkpoint alone, then the checkpoint: in a batch of
    these (and SaveCheckpoint) the writer saves the checkpoint with its fenced append, one
    statement fewer."""

    first: Apply
    save: SaveCheckpoint

    async def __call__(self, conn: Conn) -> None:
        await self.first(conn)
        await self.save(conn)


@dataclass(frozen=True)
class ClaimRead:
    """The claim of a read-only tool call for this epoch. Committed alone with its events (the
    call's tool_started), it goes into the fenced append statement (event_log.ReadClaim), so
    through the shared statement: no transaction, three round trips fewer per tool call."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    key: str
    epoch: int

    async def __call__(self, conn: Conn) -> None:
        await interrupts.claim_call(
            conn, self.run_id, self.call_id, self.tool, self.args, self.key, self.epoch, "new"
        )

    def folded(self) -> ReadClaim:
        # json.dumps as the pool's jsonb codec encodes the same args (store/db.py)
        return ReadClaim(self.call_id, self.tool, json.dumps(self.args), self.key)


@dataclass
class _Write:
    events: list[ev.RunEvent]
    apply: Apply | None
    streamed: int
    done: asyncio.Future[None] | None


class RunWriter:
    def __init__(
        self,
        pool: Pool,
        bus: EventBus,
        sink: EventSink,
        run_id: str,
        epoch: int,
        last_sequence: int,
        *,
        ride_out_s: float = 0.0,
    ) -> None:
        self.pool = pool
        self.bus = bus
        self.sink = sink
        self.run_id = run_id
        self.epoch = epoch
        # The lease holder is the run's only appender, so it keeps the position itself.
        self.last_sequence = last_sequence
        self.ride_out_s = ride_out_s
        self.cancel_requested = False
        self._queue: list[_Write] = []
        self._queued_events = 0
        self._drain_task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None

    async def emit(self, events: list[ev.RunEvent], *, streamed: int = 0) -> None:
        """Queue events; returns at once unless too much is queued already."""
        self._raise_failure()
        self._enqueue(_Write(events, None, streamed, None))
        if self._queued_events > MAX_QUEUED_EVENTS and self._drain_task is not None:
            await asyncio.shield(self._drain_task)
            self._raise_failure()

    async def commit(
        self, events: list[ev.RunEvent], apply: Apply | None = None, *, streamed: int = 0
    ) -> None:
        """Queue events and a state change, and wait until they (and all before them) are committed."""
        self._raise_failure()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(_Write(events, apply, streamed, done))
        await done

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _enqueue(self, write: _Write) -> None:
        self._queue.append(write)
        self._queued_events += len(write.events)
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.create_task(self._drain(), name=f"writer-{self.run_id}")

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = _events_only_first(self._queue)
            self._queued_events = sum(len(w.events) for w in self._queue)
            try:
                encoded, published = await self._commit_through_outage(batch)
            except BaseException as err:  # Fenced, store failure, cancellation: all writes fail
                self._failure = err if isinstance(err, Exception) else RuntimeError("cancelled")
                for w in batch + self._queue:
                    if w.done is not None and not w.done.done():
                        w.done.set_exception(self._failure)
                self._queue = []
                if not isinstance(err, Exception):
                    raise
                return
            metrics.EVENTS_APPENDED.inc(len(encoded))
            if not published:
                await self.bus.publish(self.run_id, encoded)
            for w in batch:
                if w.done is not None and not w.done.done():
                    w.done.set_result(None)

    async def _commit_through_outage(self, batch: list[_Write]) -> tuple[list[bytes], bool]:
        """`_commit`, retried while the store is unreachable, for up to `ride_out_s` from the
        first failure. The run keeps its place (the model's stream, the text it has said): handed
        back instead, it would be claimed again after the outage and re-run its step from the
        checkpoint, re-streaming what was already shown (seconds of a model's time) before its
        stream moved again.

        Retrying is safe: the append is fenced by this lease's epoch and by the log's position, so
        it lands at most once and only while no other worker took the run over. An attempt whose
        answer was lost may have committed all the same; before each retry `_landed` reads the
        run's position to tell that apart (cost: one read per retry, none without a failure). A
        batch without events moves no position, so it cannot be told apart: it is not retried."""
        added = sum(len(w.events) for w in batch)
        outage: Outage | None = None
        while True:
            try:
                if outage is not None and await self._landed(added):
                    return [], True
                return await self._commit(batch)
            except STORE_DOWN:
                if not added:
                    raise
                outage = outage or Outage(self.ride_out_s)
                if not await outage.pause():
                    raise
                metrics.WRITE_RETRIES.inc()

    async def _landed(self, added: int) -> bool:
        """After a failed attempt: True if it committed after all (the log ends where it would
        have left it, under this epoch: no other writer could have put it there), False if the
        log is still where this writer left it (retry); Fenced otherwise. A batch that landed is
        not published (its stored encoding carries the lost attempt's time stamps, which this
        writer cannot know): streams find it in Postgres at their next gap or positioning check,
        as they find any lost publish."""
        async with self.pool.acquire() as conn:
            at = await runs.position(conn, self.run_id)
        if at is None or at.epoch != self.epoch or at.status != "running":
            raise event_log.Fenced(self.run_id)
        if at.last_sequence == self.last_sequence + added:
            self.last_sequence = at.last_sequence
            self.cancel_requested = self.cancel_requested or at.cancel_requested
            return True
        if at.last_sequence != self.last_sequence:
            raise event_log.Fenced(self.run_id)
        return False

    async def _commit(self, batch: list[_Write]) -> tuple[list[bytes], bool]:
        """Returns the encoded events and whether they were already published."""
        append = LeaseAppend(
            self.run_id,
            self.epoch,
            self.last_sequence,
            [e for w in batch for e in w.events],
            sum(w.streamed for w in batch),
        )
        applies = [w.apply for w in batch if w.apply is not None]
        claim = applies[0] if len(applies) == 1 else None
        if isinstance(claim, ClaimRead) and (claim.run_id, claim.epoch) == (
            self.run_id,
            self.epoch,
        ):
            # the claim alone: it rides in the fenced append (and so in the shared statement)
            append.read_claim = claim.folded()
            applies = []
        saves = [a.save if isinstance(a, ThenSave) else a for a in applies]
        folded = all(isinstance(a, SaveCheckpoint) for a in saves)
        if applies and folded:
            # The last checkpoint wins; a reset in the batch zeroes step_streamed after the
            # batch's deltas are counted, as the separate statements did.
            last = saves[-1]
            assert isinstance(last, SaveCheckpoint)
            append.checkpoint = last.encoded
            append.reset_streamed = any(
                isinstance(a, SaveCheckpoint) and a.reset_streamed for a in saves
            )
        shared = folded and not any(isinstance(a, ThenSave) for a in applies)
        shared = shared and not outbox.announces(append.events)
        if shared:
            # Events, and at most the run's own state (the text-delta hot path, and a step's
            # end): shared with every other run's events in one statement and one pipelined
            # publish.
            cancel = await self.sink.append(append)
        else:
            async with self.pool.acquire() as conn, conn.transaction():
                # The fenced append first (with the checkpoint when folded), then each state
                # change in queue order; step_streamed adds up the deltas before any reset in
                # the same batch.
                held = await event_log.append_as_lease_holders(conn, [append])
                if self.run_id not in held:
                    raise event_log.Fenced(self.run_id)
                cancel = held[self.run_id]
                # Webhooks for what leaves Tether commit with it (events now stamped).
                await outbox.enqueue(conn, self.run_id, append.events)
                for apply in applies:
                    if not folded:
                        await apply(conn)
                    elif isinstance(apply, ThenSave):
                        await apply.first(conn)
        self.last_sequence = append.new_last
        self.cancel_requested = self.cancel_requested or cancel
        return append.encoded, shared


def _events_only_first(queue: list[_Write]) -> tuple[list[_Write], list[_Write]]:
    """The next batch to commit, and what stays queued. Writes without a state change that wait
    ahead of one go first, on their own, through the shared statement: a run's text deltas are not
    held back by (nor counted from the start of) the multi-statement transaction of the state
    change that ends the step."""
    first_apply = next((i for i, w in enumerate(queue) if w.apply is not None), len(queue))
    if 0 < first_apply < len(queue):
        return queue[:first_apply], queue[first_apply:]
    return queue, []
