"""Workers: claim queued runs (FOR UPDATE SKIP LOCKED), hold them with renewed, fenced leases,
and give them back on shutdown. New work wakes a worker by LISTEN/NOTIFY; polling is the fallback
that also picks up runs whose worker died."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from dataclasses import dataclass

import asyncpg
from opentelemetry import trace
from tether_common import task_stop
from tether_common.event_wait import wait_set
from tether_common.ids import new_id
from tether_common.logging import conversation_id_var, run_id_var
from tether_common.tracing import context_from, span_context_from

from tether_runtime import metrics
from tether_runtime.domain.records import ConversationRow, MessageRow, RunRow
from tether_runtime.engine import poison
from tether_runtime.engine.process import Engine
from tether_runtime.engine.resume import expire_interrupt
from tether_runtime.engine.run_loop import RunExecutor
from tether_runtime.store import (
    checkpoint_compaction,
    event_partitions,
    idempotency,
    interrupts,
    run_admission,
    runs,
)
from tether_runtime.store.db import STORE_ERRORS
from tether_runtime.store.event_log import Fenced
from tether_runtime.store.outage import Outage

log = logging.getLogger(__name__)
tracer = trace.get_tracer("tether.runtime.worker")

CLAIM_BATCH = 32  # most runs one claim statement takes
SWEEP_EVERY_S = 5.0  # expiry, queue depth, promotion, idempotency keys, compaction, partitions
PARTITIONS_EVERY_S = 60.0  # the partition job's turns: its work changes once a day


@dataclass(slots=True)
class _Held:
    """A run this worker executes, as its heartbeat sees it."""

    run: RunRow
    task: asyncio.Task[None]
    executor: RunExecutor


class Worker:
    def __init__(self, engine: Engine) -> None:
        self.e = engine
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[2:12]}"
        self.wake = asyncio.Event()
        self.tasks: dict[str, tuple[asyncio.Task[None], int]] = {}
        # The runs being executed, by id: the heartbeat renews all their leases in one statement.
        self._held: dict[str, _Held] = {}
        self._beat_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._listener: asyncpg.Connection | None = None
        self._polling_logged = False
        self._loop_task: asyncio.Task[None] | None = None
        self._partitions_at = float("-inf")  # the first sweep takes a turn

    async def start(self) -> None:
        await self._listen()
        self._loop_task = asyncio.create_task(self._claim_loop(), name="worker-claim-loop")
        self._beat_task = asyncio.create_task(self._heartbeat(), name="worker-heartbeat")

    def _listen_url(self) -> str:
        """Where LISTEN goes: a session-mode DSN. Through a transaction pooler LISTEN would be
        registered on whichever server connection that one statement borrowed, and its
        notifications lost once that connection serves other clients: no LISTEN there."""
        s = self.e.settings
        if s.db_listen_url:
            return s.db_listen_url
        return s.database_url if s.db_pooler == "none" else ""

    async def _listen(self) -> None:
        url = self._listen_url()
        if not url:
            if not self._polling_logged:
                self._polling_logged = True
                log.warning(
                    "DATABASE_URL goes through a transaction pooler and TETHER_DB_LISTEN_URL is "
                    "not set: new runs are found by polling every %ss, not woken by NOTIFY",
                    self.e.settings.poll_interval_s,
                )
            return
        try:
            self._listener = await asyncpg.connect(url)
            await self._listener.add_listener(runs.WAKE_CHANNEL, lambda *_: self.wake.set())
            held = self.e.held
            await self._listener.add_listener(
                runs.HELD_CHANNEL, lambda _c, _p, _ch, run_id: held.notified(run_id)
            )
            held.listening = True
            # A server restart ends this session: wake the loop, which listens again at once
            # (else NOTIFYs are lost until its next poll), and every waiting question.
            self._listener.add_termination_listener(lambda *_: self._lost_listen())
        except STORE_ERRORS as err:
            log.warning("LISTEN failed, relying on polling: %s", err)
            self._listener = None
            self.e.held.listening = False

    def _lost_listen(self) -> None:
        self.e.held.listening = False
        self.e.held.wake_all()
        self.wake.set()

    async def _claim_loop(self) -> None:
        ttl = self.e.settings.lease_ttl_s
        backoff = self.e.settings.run_retry_backoff_s
        swept = float("-inf")
        while not self._stopping:
            try:
                if self._listener is None or self._listener.is_closed():
                    await self._listen()  # polling only when there is nowhere to LISTEN
                while not self._stopping and self.slots_free() > 0:
                    # One statement claims as many runs as there are free slots (at most a
                    # batch): a burst of new runs is picked up in a few round trips, not one each.
                    free = min(self.slots_free(), CLAIM_BATCH)
                    async with self.e.pool.acquire() as conn:
                        claimed = await runs.claim_with_conversations(
                            conn, self.owner, ttl, free, backoff_s=backoff, held=list(self.tasks)
                        )
                    for c in claimed:
                        if c.took_over:
                            metrics.LEASE_TAKEOVERS.inc()
                        self._spawn(c.run, c.conversation, c.turns)
                    if len(claimed) < free:
                        break
                # By the clock, not by the loop's turns: every new run's NOTIFY and every run's
                # end wakes the loop, and a sweep per so many turns ran several statements per
                # run under load (0.2-1 of a short run's 18).
                if time.monotonic() - swept >= SWEEP_EVERY_S:
                    swept = time.monotonic()
                    await self._expire_overdue()
                    await self._observe_queue()
                    await self._promote_stalled()
                    await self._expire_idempotency_keys()
                    await self._compact_checkpoints()
                    await self._maintain_event_partitions()
            except STORE_ERRORS as err:
                log.warning("claim loop: database unavailable: %s", err)
            # (not wait_for: a cancel in the same turn as the wake, as stop() does, is kept)
            await wait_set(self.wake, self.e.settings.poll_interval_s)
            # Two turns of the loop before the claim, so that the wakes arriving together (new
            # runs' NOTIFYs, runs ending) go into one claim: wait_for's own task and callback
            # gave them that, and without it `make bench` measured 0.45 -> 0.68 claims per run.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            self.wake.clear()

    def slots_free(self) -> int:
        """Runs this worker may still take: one slot per run in `tasks`."""
        return self.e.settings.worker_concurrency - len(self.tasks)

    def _spawn(
        self,
        run: RunRow,
        conversation: ConversationRow | None = None,
        turns: list[MessageRow] | None = None,
    ) -> None:
        if poison.exhausted(run, self.e.settings.max_run_attempts):
            work = self._give_up(run)
        else:
            work = self._execute(run, conversation, turns)
        task = asyncio.create_task(work, name=f"run-{run.id}")
        self.tasks[run.id] = (task, run.lease_epoch)

    async def _give_up(self, run: RunRow) -> None:
        """The claim found the run's attempts spent: fail it instead of executing it."""
        run_id_var.set(run.id)
        conversation_id_var.set(run.conversation_id)
        try:
            if not await poison.give_up(
                self.e.pool, self.e.bus, run, self.e.settings.max_run_attempts
            ):
                metrics.LEASES_LOST.inc()
                log.warning("lease lost before the run could be failed")
        except STORE_ERRORS as err:
            # Nothing was written: the lease expires and the next claim tries again.
            log.warning("could not fail a run whose attempts are spent: %s", err)
        finally:
            self._release_slot(run.id)

    async def _execute(
        self,
        run: RunRow,
        conversation: ConversationRow | None = None,
        turns: list[MessageRow] | None = None,
    ) -> None:
        run_id_var.set(run.id)
        conversation_id_var.set(run.conversation_id)
        executor = RunExecutor(self.e, run, conversation, turns)
        task = asyncio.current_task()
        assert task is not None
        held = self._held[run.id] = _Held(run, task, executor)
        # The run's steps continue the trace of the request that queued them (StartRun, or the
        # approval for a continuation), and link to it explicitly.
        origin = span_context_from(run.trace_context)
        span = tracer.start_span(
            "run.execute",
            context=context_from(run.trace_context),
            links=[trace.Link(origin)] if origin else None,
            attributes={"tether.run_id": run.id, "tether.lease_epoch": run.lease_epoch},
        )
        try:
            with trace.use_span(span, end_on_exit=True):
                status = await executor.execute()
            log.info("run left worker", extra={"status": status})
        except Fenced:
            metrics.LEASES_LOST.inc()
            log.warning("lease lost; another worker owns the run now")
        except asyncio.CancelledError:
            pass  # shutdown or lease loss; the lease is released (or already gone)
        except STORE_ERRORS as err:
            # The store went away under the run: keep no state. Hand it back as soon as the
            # store answers again (else its lease expires and a worker takes it over).
            log.warning("run interrupted by a store failure: %s", err)
            await self._give_back(run)
        except Exception:
            log.exception("run failed")
            with contextlib.suppress(Exception):
                await executor.fail("INTERNAL", "The run failed unexpectedly.")
        finally:
            if self._held.get(run.id) is held:
                del self._held[run.id]
            self._release_slot(run.id)

    def _release_slot(self, run_id: str) -> None:
        """The run left this worker. Only a worker that was full looks for queued runs at once:
        one with a free slot claimed every run whose NOTIFY it heard (the poll finds the rest),
        and a claim per run's end would be a statement per run for nothing."""
        full = self.slots_free() <= 0
        self.tasks.pop(run_id, None)
        if full:
            self.wake.set()

    async def _give_back(self, run: RunRow) -> None:
        """Requeue a run a store outage interrupted, with its attempt returned (an outage says
        nothing about the run, so it must not count toward RUN_ATTEMPTS_EXHAUSTED), while this
        worker's lease still holds; fenced, so a run taken over meanwhile is left alone."""
        # Fenced by the epoch, so trying past the lease's end is safe; and a short capped pause
        # (not a doubling one grown through the outage) gives it back soon after the store is.
        outage = Outage(max(self.e.settings.lease_ttl_s, self.e.settings.store_ride_out_s))
        while not self._stopping:
            try:
                async with self.e.pool.acquire() as conn:
                    await runs.release(conn, run.id, run.lease_epoch)
                return
            except STORE_ERRORS:
                if not await outage.pause():
                    return

    async def _heartbeat(self) -> None:
        """Every third of a lease, one statement renews the lease of every run this worker
        executes (a run held by its tool's question too). A run whose lease was lost meanwhile
        (taken over after this worker stalled) is stopped, not one that ended its lease itself
        while the statement ran (it finished, or paused at a card); a cancel requested for a
        run reaches its executor. One task and one statement a beat for the whole worker: a task,
        a timer and a statement per run before."""
        ttl = self.e.settings.lease_ttl_s
        outage: Outage | None = None
        while True:
            if outage is None:
                await asyncio.sleep(ttl / 3)
            elif not await outage.pause():
                outage = None  # a long outage: back to the usual beat
                continue
            held = list(self._held.values())
            if not held:
                continue
            try:
                async with self.e.pool.acquire() as conn:
                    kept, lost = await runs.renew_many(
                        conn, [(h.run.id, h.run.lease_epoch) for h in held], ttl
                    )
            except Exception as err:  # noqa: BLE001 - one beat keeps every lease: it goes on
                # Renew again soon after the store returns, not a third of a TTL later: an outage
                # longer than the lease leaves it expired meanwhile, open to another pod's claim.
                # Any other failure is retried the same way: a per-run beat that died took one
                # run's lease with it, this one would take the whole worker's.
                if outage is None:
                    log.warning("heartbeat failed: %s", err, extra={"runs": len(held)})
                    outage = Outage(self.e.settings.store_ride_out_s)
                continue
            outage = None
            for h in held:
                cancel = kept.get(h.run.id)
                if cancel is not None:
                    h.executor.cancel_requested = h.executor.cancel_requested or cancel
                elif h.run.id in lost and self._held.get(h.run.id) is h:  # still executing it
                    del self._held[h.run.id]
                    metrics.LEASES_LOST.inc()
                    log.warning(
                        "lease lost at heartbeat; stopping",
                        extra={"run_id": h.run.id, "conversation_id": h.run.conversation_id},
                    )
                    h.task.cancel()

    async def _expire_overdue(self) -> None:
        """Overdue interrupts, and the questions of calls whose waiting worker died (its lease
        ran out: held_questions.py): expired, so each run moves on."""
        async with self.e.pool.acquire() as conn:
            overdue = await interrupts.overdue(conn)
            overdue += await interrupts.orphaned_held(conn)
        for intr in overdue:
            await expire_interrupt(self.e.pool, self.e.bus, intr)

    async def _compact_checkpoints(self) -> None:
        """TETHER_CHECKPOINT_COMPACT_AFTER_S: one batch per sweep."""
        async with self.e.pool.acquire() as conn:
            await checkpoint_compaction.compact(conn, self.e.settings.checkpoint_compact_after_s)

    async def _maintain_event_partitions(self) -> None:
        """TETHER_EVENT_RETENTION_S: run_event's days ahead, expired ones dropped; every pod takes
        turns, the job's advisory lock lets one of them work at a time."""
        if time.monotonic() - self._partitions_at < PARTITIONS_EVERY_S:
            return
        self._partitions_at = time.monotonic()
        async with self.e.pool.acquire() as conn:
            await event_partitions.maintain(conn, self.e.settings.event_retention_s)

    async def _expire_idempotency_keys(self) -> None:
        """TETHER_IDEMPOTENCY_TTL_S: one batch per sweep (a backlog drains over a few sweeps)."""
        async with self.e.pool.acquire() as conn:
            await idempotency.delete_expired(conn)

    async def _promote_stalled(self) -> None:
        """Waiting runs whose predecessors' end did not queue them (concurrent_runs.py)."""
        async with self.e.pool.acquire() as conn:
            await run_admission.promote_stalled(conn)

    async def _observe_queue(self) -> None:
        async with self.e.pool.acquire() as conn:
            depth, age = await runs.queue_depth(conn)
        metrics.QUEUE_DEPTH.set(depth)
        metrics.QUEUE_OLDEST_AGE.set(age)

    async def stop(self, grace_s: float) -> None:
        """Stop claiming, let runs reach a safe point briefly, then release their leases."""
        self._stopping = True
        self.wake.set()
        await task_stop.stop(self._loop_task)
        held = dict(self.tasks)
        for task, _ in held.values():
            task.cancel()
        if held:
            await asyncio.wait([t for t, _ in held.values()], timeout=grace_s)
        # the leases renewed while the runs reach their safe point
        await task_stop.stop(self._beat_task)
        for run_id, (_, epoch) in held.items():
            try:
                async with self.e.pool.acquire() as conn:
                    await runs.release(conn, run_id, epoch)
            except STORE_ERRORS as err:
                log.warning("could not release %s (its lease will expire): %s", run_id, err)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
