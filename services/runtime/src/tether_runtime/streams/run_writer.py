"""The one write path of an executing run. Writes queue in order; a single drain task commits
everything queued so far at once, numbered by this lease holder and fenced by its epoch and
position, then publishes it. Text deltas are queued without waiting and go through the
process-wide EventSink (shared with other runs), and so do the state changes that fold into that
statement (a checkpoint, a read call's claim and result, the run's end: `Fold`); a batch carrying
any other state change commits in one transaction of its own. State changes wait until they are durable. A commit the store cannot take
right now (a restart, a failover) is retried for a while (`_commit_through_outage`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tether_common.run_bus import EventBus

from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, grants, interrupts, runs
from tether_runtime.store.db import STORE_DOWN, Conn, Pool
from tether_runtime.store.event_log import CallFinish, LeaseAppend, ReadClaim, RunEnd
from tether_runtime.store.outage import Outage
from tether_runtime.streams.event_sink import EventSink

Apply = Callable[[Conn], Awaitable[None]]
MAX_QUEUED_EVENTS = 2000  # past this, emitters wait for the drain: memory stays bounded


class Fold:
    """A state change that can ride in the fenced append (event_log.LeaseAppend): a commit
    whose state changes all fold needs no transaction of its own, and shares one statement (and
    one pipelined publish) with every other run's events through the EventSink. Called as an
    Apply, it makes the same change with its own statements (inside a transaction)."""

    def fold(self, append: LeaseAppend) -> Apply | None:
        """Put what it can into `append`; return what must still run in the transaction, after
        the append (None: nothing; itself: it could not fold, e.g. a second claim)."""
        raise NotImplementedError

    async def __call__(self, conn: Conn) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class SaveCheckpoint(Fold):
    """The state change that saves the run's own checkpoint (encoded JSON); folded, the last
    one of a batch wins, and a reset zeroes step_streamed after the batch's deltas are counted,
    as the separate statements did."""

    run_id: str
    epoch: int
    encoded: str
    reset_streamed: bool

    def fold(self, append: LeaseAppend) -> Apply | None:
        append.checkpoint = self.encoded
        append.reset_streamed = append.reset_streamed or self.reset_streamed
        return None

    async def __call__(self, conn: Conn) -> None:
        await runs.save_checkpoint(
            conn, self.run_id, self.epoch, self.encoded, reset_streamed=self.reset_streamed
        )


@dataclass(frozen=True)
class ThenSave(Fold):
    """A state change that leaves the run's checkpoint alone, then the checkpoint: the save
    folds into the append (the order between the two does not matter), `first` runs in the
    transaction."""

    first: Apply
    save: SaveCheckpoint

    def fold(self, append: LeaseAppend) -> Apply | None:
        self.save.fold(append)
        return self.first

    async def __call__(self, conn: Conn) -> None:
        await self.first(conn)
        await self.save(conn)


@dataclass(frozen=True)
class Interrupted(ThenSave):
    """The run pauses for a person: a ThenSave (`first`, the call's row and the interrupt, in
    the transaction; the checkpoint folded) whose append also ends the run `interrupted` (as
    runs.finish: the lease given back, the attempts over), two round trips fewer per interrupt.
    After another end in the batch it cannot fold, and makes the same changes with statements
    of its own."""

    def fold(self, append: LeaseAppend) -> Apply | None:
        if append.end is not None:
            return self
        append.end = RunEnd("interrupted")
        return super().fold(append)

    async def __call__(self, conn: Conn) -> None:
        await super().__call__(conn)
        await runs.finish(conn, self.save.run_id, self.save.epoch, "interrupted")


@dataclass(frozen=True)
class ReadGrant:
    """What a read tool declares: `user_id` must hold `action` on `scope`, as policy.granted
    decides it (the store's one matcher, store/grants.py, in Python or in run_append's SQL)."""

    user_id: str
    action: str
    scope: str


@dataclass(frozen=True)
class ClaimRead(Fold):
    """The claim of a read-only tool call for this epoch, folded with its `tool_started`
    (event_log.ReadClaim): three round trips fewer per tool call. With `grant`, the claim is
    made only if the run's user holds it, read by the same statement (or transaction): the
    commit raises event_log.Denied otherwise, and nothing of it is written."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    key: str
    epoch: int
    grant: ReadGrant | None = None

    def fold(self, append: LeaseAppend) -> Apply | None:
        if append.read_claim is not None or (append.run_id, append.epoch) != (
            self.run_id,
            self.epoch,
        ):
            return self
        grant = self.grant
        # json.dumps as the pool's jsonb codec encodes the same args (store/db.py)
        append.read_claim = ReadClaim(
            self.call_id,
            self.tool,
            json.dumps(self.args),
            self.key,
            grant.action if grant is not None else None,
            grant.scope if grant is not None else "",
        )
        return None

    async def __call__(self, conn: Conn) -> None:
        grant = self.grant
        if grant is not None and not await grants.has_grant(
            conn, grant.user_id, grant.action, grant.scope
        ):
            raise event_log.Denied(self.run_id)
        await interrupts.claim_call(
            conn, self.run_id, self.call_id, self.tool, self.args, self.key, self.epoch, "new"
        )


@dataclass(frozen=True)
class FinishRead(Fold):
    """A read-only call's result (event_log.CallFinish: the call's row, the facts it confirms
    for the conversation) with the checkpoint that records it for the model: folded with its
    `tool_finished`, no transaction (five round trips fewer per tool call)."""

    run_id: str
    epoch: int
    conversation_id: str
    finish: CallFinish
    body: dict[str, Any]
    save: SaveCheckpoint

    def fold(self, append: LeaseAppend) -> Apply | None:
        # A claim and a result in one statement would not see each other's row.
        if append.call_finish is not None or append.read_claim is not None:
            return self
        append.call_finish = self.finish
        return self.save.fold(append)

    async def __call__(self, conn: Conn) -> None:
        f = self.finish
        await interrupts.finish_call(
            conn, self.run_id, f.call_id, self.epoch, f.ok, f.summary, self.body
        )
        if f.facts_json is not None:
            await conversations.merge_facts(conn, self.conversation_id, self.body["facts"])
        await self.save(conn)


@dataclass(frozen=True)
class EndRun(Fold):
    """The run leaves its worker (event_log.RunEnd), with its final checkpoint if saved: folded
    with its terminal event, no transaction (four round trips fewer per run)."""

    run_id: str
    epoch: int
    conversation_id: str
    end: RunEnd
    checkpoint: str | None

    def fold(self, append: LeaseAppend) -> Apply | None:
        if append.end is not None:
            return self
        append.end = self.end
        if self.checkpoint is not None:
            append.checkpoint, append.reset_streamed = self.checkpoint, True
        return None

    async def __call__(self, conn: Conn) -> None:
        if self.end.answer_id is not None:
            await conversations.add_message(
                conn,
                self.conversation_id,
                "assistant",
                self.end.answer,
                run_id=self.run_id,
                message_id=self.end.answer_id,
            )
        await runs.finish(conn, self.run_id, self.epoch, self.end.status, self.checkpoint)


WHOLE_FOLDS = (SaveCheckpoint, ClaimRead, FinishRead, EndRun)
"""Folds that need no transaction at all (unless a batch holds two that conflict)."""


@dataclass
class _Write:
    events: list[ev.RunEvent]
    apply: Apply | None
    streamed: int
    done: asyncio.Future[None] | None
    staged: bool = False
    """Waits for the next write to commit with it (`stage`)."""


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

    def stage(self, save: SaveCheckpoint) -> None:
        """Queue the run's checkpoint to commit with the next write, not on its own: a model step
        that asks for tool calls saves them, and the first call's claim (or card, or skip)
        follows at once; one statement then carries both, atomically, in order. Until then it is
        not durable: a worker that dies in between leaves the step to be taken again, as if it
        died before the save. Every path after such a step writes (RunExecutor)."""
        self._raise_failure()
        self._queue.append(_Write([], save, 0, None, staged=True))

    def send(self, events: list[ev.RunEvent], apply: Apply) -> None:
        """Queue events and the state change that records them, without waiting: committed
        together and in queue order (with whatever is queued beside them, so a commit that
        follows at once shares their statement). Durable when any later `commit` returns; a
        failure fails that commit, as it fails every later write."""
        self._raise_failure()
        self._enqueue(_Write(events, apply, 0, None))

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
        while self._queue and not all(w.staged for w in self._queue):
            batch, self._queue = _events_only_first(self._queue)
            self._queued_events = sum(len(w.events) for w in self._queue)
            try:
                encoded, published = await self._commit_through_outage(batch)
            except event_log.Denied as err:
                self._refused(batch, err)
                continue
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

    def _refused(self, batch: list[_Write], err: event_log.Denied) -> None:
        """A read claim's grant is not the run's user's: nothing of the batch was written. The
        claim's commit fails with `err` (its caller records the denial); the writes around it go
        back to the front of the queue, in order, for the next batch."""
        claim = next(w for w in batch if isinstance(w.apply, ClaimRead) and w.apply.grant)
        self._queue = [w for w in batch if w is not claim] + self._queue
        self._queued_events = sum(len(w.events) for w in self._queue)
        if claim.done is not None and not claim.done.done():
            claim.done.set_exception(err)

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

    async def rejoin(self) -> None:
        """The run was held for a person's answer (runs.hold) and another process appended to
        its log (the answer): take the log's position again, under this lease only."""
        if self._drain_task is not None:
            await asyncio.shield(self._drain_task)
        self._raise_failure()
        async with self.pool.acquire() as conn:
            at = await runs.position(conn, self.run_id)
        if at is None or at.epoch != self.epoch or at.status != "running":
            raise event_log.Fenced(self.run_id)
        self.last_sequence = at.last_sequence
        self.cancel_requested = self.cancel_requested or at.cancel_requested

    async def _commit(self, batch: list[_Write]) -> tuple[list[bytes], bool]:
        """Returns the encoded events and whether they were already published."""
        append = LeaseAppend(
            self.run_id,
            self.epoch,
            self.last_sequence,
            [e for w in batch for e in w.events],
            sum(w.streamed for w in batch),
        )
        # Fold the batch's state changes into the append, in order; from the first that
        # leaves something to run in a transaction on, the rest runs there too, in order.
        rest: list[Apply] = []
        for w in batch:
            if w.apply is None:
                continue
            left = w.apply.fold(append) if not rest and isinstance(w.apply, Fold) else w.apply
            if left is not None:
                rest.append(left)
        if not rest:
            # Events and the run's own state changes: shared with every other run's events in
            # one statement and one pipelined publish.
            return await self._shared(append), True
        async with self.pool.acquire() as conn, conn.transaction():
            # The fenced append first (with what folded, and the webhook deliveries of what
            # leaves Tether), then each remaining state change in queue order.
            held = await event_log.append_as_lease_holders(conn, [append])
            if self.run_id in held.denied:
                raise event_log.Denied(self.run_id)  # rolls back: nothing of the batch stays
            if self.run_id not in held:
                raise event_log.Fenced(self.run_id)
            for apply in rest:
                await apply(conn)
        self._advance(append, held[self.run_id])
        return append.encoded, False

    async def _shared(self, append: LeaseAppend) -> list[bytes]:
        self._advance(append, await self.sink.append(append))
        return append.encoded

    def _advance(self, append: LeaseAppend, cancel: bool) -> None:
        self.last_sequence = append.new_last
        self.cancel_requested = self.cancel_requested or cancel


def _events_only_first(queue: list[_Write]) -> tuple[list[_Write], list[_Write]]:
    """The next batch to commit, and what stays queued. Writes without a state change that wait
    ahead of one needing a transaction go first, on their own, through the shared statement: a
    run's text deltas are not held back by (nor counted from the start of) the multi-statement
    transaction of the state change that ends the step. Ahead of a whole fold they go with it,
    in the same shared statement."""
    first_apply = next((i for i, w in enumerate(queue) if w.apply is not None), len(queue))
    if 0 < first_apply < len(queue) and not isinstance(queue[first_apply].apply, WHOLE_FOLDS):
        return queue[:first_apply], queue[first_apply:]
    return queue, []
