"""StreamRunEvents: replay from Postgres after the resume point, then follow live batches from
Redis, dropping what was already sent and filling any gap from Postgres. When the stream is quiet
it compares its position with the run's last sequence, so even a lost *last* event is found."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import TypeVar

from tether_common.auth import Principal
from tether_common.backoff import HALF_JITTER, Backoff, Retries
from tether_common.event_batch import following
from tether_common.run_bus import EventBus, Subscription, check_positions

from tether_runtime import metrics
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import TERMINAL_STATUSES
from tether_runtime.domain.views import RunView
from tether_runtime.engine.resume import load_owned_run
from tether_runtime.store import event_log, event_partitions, interrupts, runs
from tether_runtime.store.db import STORE_DOWN, STORE_ERRORS, Conn, Pool

PAGE = 2000
READ_PAUSE_S = 0.5  # the longest pause between a stream's reads while the store is away
READ_BACKOFF = Backoff(0.1, READ_PAUSE_S, jitter=HALF_JITTER)
T = TypeVar("T")
log = logging.getLogger(__name__)


class EventStream:
    """Yields lists of encoded RunEvents or an already-encoded batch (each becomes one gRPC
    message), or the run's view when the resume point is impossible (the caller sends `reset`)."""

    def __init__(self, pool: Pool, bus: EventBus, quiet_check_s: float) -> None:
        self.pool = pool
        self.bus = bus
        self.quiet_check_s = quiet_check_s
        self._checker: asyncio.Task[None] | None = None

    async def _stored_positions(self, run_ids: set[str]) -> dict[str, int] | None:
        """The positioning check's read (run_bus.check_positions): ONE query for every run this
        process streams quietly. A failed round is logged and skipped: an error outside
        STORE_DOWN (e.g. a lock timeout) once ended the check silently, and every open stream
        then waited forever for its run's last events."""
        try:
            async with self.pool.acquire() as conn:
                return await runs.last_sequences(conn, run_ids)
        except STORE_DOWN as err:
            log.warning("positioning check skipped: %s", err)
        except Exception:
            log.exception("positioning check failed; checking again in %.1fs", self.quiet_check_s)
        return None

    def _ensure_checker(self) -> None:
        if self._checker is None or self._checker.done():
            checking = check_positions(
                self.bus, self.quiet_check_s, self._stored_positions, unknown_behind=False
            )
            self._checker = asyncio.create_task(checking, name="position-check")

    async def open(self, principal: Principal, run_id: str, after: int) -> RunView:
        async with self.pool.acquire() as conn:
            run = await load_owned_run(conn, principal, run_id)
            # The pending interrupt only matters to a `reset` (a resume point past the log).
            reset = after > run.last_sequence
            pending = await interrupts.pending_for_run(conn, run_id) if reset else None
        return RunView.of(run, pending)

    def listen(self, run_id: str) -> contextlib.AbstractContextManager[Subscription]:
        """Subscribe to a run's live batches, even before the run exists (a stream that starts
        the run itself); `follow_subscribed` then streams it."""
        return self.bus.subscribe(run_id)

    async def follow(
        self, view: RunView, after: int
    ) -> AsyncIterator[list[bytes] | bytes | RunView]:
        with self.listen(view.id) as sub:
            async for item in self.follow_subscribed(sub, view, after):
                yield item

    async def follow_subscribed(
        self, sub: Subscription, view: RunView, after: int, *, first: bytes | None = None
    ) -> AsyncIterator[list[bytes] | bytes | RunView]:
        """`first`: the run's first event, encoded, from the start that made it, with `sub`
        confirmed before the run was stored (runs_api.StreamedStart): everything after it
        arrives on `sub`, so nothing is read back from Postgres (one round trip fewer, and the
        first event goes out as soon as the run is stored)."""
        run_id = view.id
        metrics.STREAMS_ACTIVE.inc()
        try:
            if first is not None and after == 0:
                yield [first]
                last = 1
            else:
                await self.bus.confirmed(sub)  # before reading Postgres: no batch slips between
                last = after
                if after > view.last_sequence:
                    yield view  # the caller sends `reset`; then continue from the real position
                    last = view.last_sequence
                if view.status in TERMINAL_STATUSES and last >= view.last_sequence:
                    return
                done = replayed = False
                async for batch, upto in self._from_db(run_id, last):
                    yield batch
                    last, done, replayed = upto, done or _has_terminal(batch), True
                if done:
                    return
                if not replayed and last < view.last_sequence and view.status in TERMINAL_STATUSES:
                    # A finished run whose log is missing: retention dropped it (only then, since
                    # a run's events commit with its last_sequence). Its state is all that is
                    # left.
                    if await self._read(partial(event_partitions.events_expired, run_id=run_id)):
                        yield replace(view, events_expired=True)
                    return
            self._ensure_checker()
            while True:
                sub.position, sub.last_heard = last, time.monotonic()
                datas = [await sub.queue.get()]
                while not sub.queue.empty():  # a stream that fell behind catches up in one message
                    datas.append(sub.queue.get_nowait())
                pieces, last, end, gap = _live(datas, last)
                if pieces:
                    yield pieces[0] if len(pieces) == 1 else b"".join(pieces)
                if end:
                    return
                if not gap and not sub.overflowed:
                    continue
                # A gap (lost or dropped message, or the quiet check): Postgres has it all.
                metrics.STREAM_GAP_FILLS.inc()
                log.debug("stream %s: filling from Postgres after %d", run_id, last)
                sub.overflowed = False
                async for batch, upto in self._from_db(run_id, last):
                    yield batch
                    last = upto
                    if _has_terminal(batch):
                        return
        finally:
            metrics.STREAMS_ACTIVE.dec()

    async def _from_db(self, run_id: str, after: int) -> AsyncIterator[tuple[list[bytes], int]]:
        last = after
        while True:
            rows = await self._read(partial(_page, run_id=run_id, after=last))
            if not rows:
                return
            last = rows[-1][0]
            yield [data for _, data in rows], last
            if len(rows) < PAGE:
                return

    async def _read(self, query: Callable[[Conn], Awaitable[T]]) -> T:
        """A read that rides out a store outage (a Postgres restart or failover): the stream stays
        open (the gateway keeps sending heartbeats) and the client sees a delay, not an error it
        would have to reconnect through (a browser's EventSource gives up for good on the 503 it
        would get meanwhile). It retries for as long as the client stays connected, at most
        READ_PAUSE_S apart (jittered): a pause doubled through a 5 s restart up to 2 s kept a
        stream waiting up to that long after the store was back."""
        retries = Retries(READ_BACKOFF)
        while True:
            try:
                async with self.pool.acquire() as conn:
                    return await query(conn)
            except STORE_ERRORS as err:
                log.warning("event stream: store unavailable, retrying: %s", err)
                await retries.pause()


async def _page(conn: Conn, *, run_id: str, after: int) -> list[tuple[int, bytes]]:
    return await event_log.read_after(conn, run_id, after, PAGE)


def _live(datas: list[bytes], last: int) -> tuple[list[bytes], int, bool, bool]:
    """Published batches in arrival order -> (encoded messages for what follows `last`
    densely, the new last sequence, whether the terminal event is among them, whether there is
    a gap to fill from Postgres: a missing sequence, or a nudge, the empty message). Whole
    batches pass through as published (their concatenation is one valid message)."""
    pieces: list[bytes] = []
    for data in datas:
        if not data:
            return pieces, last, False, True
        decoded = ev.split_batch(data)
        fresh = following(decoded, last)
        if fresh is None:
            return pieces, last, False, True
        if not fresh:
            continue  # already sent
        whole = len(fresh) == len(decoded)
        pieces.append(
            data if whole else ev.batch_from_encoded([e.SerializeToString() for e in fresh])
        )
        last = fresh[-1].sequence
        if ev.is_terminal(fresh[-1]):
            return pieces, last, True, False
    return pieces, last, False, False


def _has_terminal(batch: list[bytes]) -> bool:
    return bool(batch) and ev.is_terminal(ev.RunEvent.FromString(batch[-1]))
