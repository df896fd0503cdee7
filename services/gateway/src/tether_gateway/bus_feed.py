"""A run this gateway process starts, followed on the Redis bus (DESIGN "Where fan-out happens").

A streaming POST makes the run's id itself, subscribes to the run's channel and waits for Redis
to confirm it, and only then asks the runtime to store the run under that id (StartRun with
`run_id`). The answer carries the run's first event, which commits with the run and is never
published; every later batch is published after its commit, and from the confirmation on none
can pass this process by. So the run's feed takes the first event from the answer and the rest
from the bus, in order, each once, with no gRPC stream held for the run: the runtime keeps no
stream task, subscription or sends for it, the gateway no streamed call.

The bus is a fast path, never the truth. A batch that does not follow the last event densely (a
publish lost), a subscription that overflowed, the subscriber connection made again (the bus
nudges its streams), or a run found behind by the positioning check (`watch_quiet`: a quiet run
whose stored last sequence is past the feed's, a lost *last* publish) hands the run over to the
runtime's stream (`runtime_client.follow_events`) from the last event delivered: what the bus
missed comes from Postgres, exactly as for every other run. A run that is merely quiet (a card
waiting for a person, a slow tool) stays on the bus, holding nothing in the runtime. A start
that Redis did not confirm in time, or whose answer names another run (a replayed start, a
runtime older than `run_id`), is followed on the runtime's stream from the start."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.event_batch import following, split_batch
from tether_common.ids import new_id
from tether_common.run_bus import EventBus, Subscription, check_positions

from tether_gateway.runtime_client import ends_run

log = logging.getLogger(__name__)

Batches = AsyncGenerator[Sequence[events_pb2.RunEvent], None]
POSITIONS_PER_CALL = 1000  # GetRunPositions' limit


class Listening:
    """The bus subscription of a run this process is about to start, held until its feed stops
    following the bus (`close`, idempotent)."""

    def __init__(self, bus: EventBus, run_id: str) -> None:
        self.bus = bus
        self._held = bus.subscribe(run_id)
        self.sub: Subscription = self._held.__enter__()
        self.sub.last_heard = time.monotonic()  # quiet from now on, not from the epoch
        self.closed = False

    async def confirmed(self) -> bool:
        """Whether Redis confirmed the subscription (waiting briefly): only then may the run be
        stored, since a batch published before the confirmation could pass this process by."""
        return await self.bus.confirmed(self.sub)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._held.__exit__(None, None, None)


async def follow_listened(
    listening: Listening, rest: Callable[[], Batches], outcome: Callable[[str], None]
) -> Batches:
    """The run's batches from the bus, after the events StartRun's answer delivered (up to the
    subscription's `position`, which start_on_bus set); at the first doubt, `rest()` (the
    runtime's stream from the last event delivered). The caller stops iterating at the terminal
    event. `outcome` hears how the bus's part ended: `ended` (the run's terminal event came on
    it), `gap`, `nudge` or `overflow` (handed over), `left` (the feed closed first)."""
    sub, how = listening.sub, "left"
    last = sub.position
    try:
        while True:
            datas = [await sub.queue.get()]
            while not sub.queue.empty():
                datas.append(sub.queue.get_nowait())
            events, doubt = _dense(datas, last)
            if events:
                last = sub.position = events[-1].sequence
                if ends_run(events):
                    how = "ended"
                yield events
                if how == "ended":
                    return
            if doubt or sub.overflowed:
                how = doubt or "overflow"
                break
    finally:
        listening.close()
        outcome(how)
    log.debug("run %s: followed on the runtime's stream after %d (%s)", sub.run_id, last, how)
    async with contextlib.aclosing(rest()) as stream:
        async for batch in stream:
            yield batch


def _dense(datas: list[bytes], last: int) -> tuple[list[events_pb2.RunEvent], str]:
    """The events of published batches that follow `last` densely, and what ended them early:
    `gap` (a lost publish) or `nudge` (an empty message: the bus's connection was made again, or
    the positioning check found the run behind), where the runtime's stream takes over; empty
    when none did."""
    out: list[events_pb2.RunEvent] = []
    for data in datas:
        if not data:
            return out, "nudge"
        fresh = following(split_batch(data), last)
        if fresh is None:
            return out, "gap"
        if fresh:  # (empty: a publish repeated after a commit that landed, run_writer)
            out.extend(fresh)
            last = fresh[-1].sequence
    return out, ""


def positions_of(
    read: Callable[[list[str]], Awaitable[dict[str, int]]],
) -> Callable[[set[str]], Awaitable[dict[str, int] | None]]:
    """The gateway's read for run_bus.check_positions: GetRunPositions (`read`), in calls of at
    most its limit; None when a call fails (the runtime away, or older than the RPC), and every
    quiet run is then handed over to the runtime's stream."""

    async def positions(run_ids: set[str]) -> dict[str, int] | None:
        ids = sorted(run_ids)
        latest: dict[str, int] = {}
        try:
            for i in range(0, len(ids), POSITIONS_PER_CALL):
                latest.update(await read(ids[i : i + POSITIONS_PER_CALL]))
        except Exception as err:
            log.warning("positioning check failed, handing %d runs over: %r", len(ids), err)
            return None
        return latest

    return positions


def watch_quiet(
    bus: EventBus, quiet_s: float, read: Callable[[list[str]], Awaitable[dict[str, int]]]
) -> Coroutine[Any, Any, None]:
    """The positioning check of the runs followed on the bus (run_bus.check_positions, a
    runtime's streams' own): every `quiet_s`, GetRunPositions for every run quiet as long, and
    each run behind (a lost last publish), left out of the answer, or every quiet run when the
    call fails, is nudged over to the runtime's stream. A run merely quiet stays on the bus."""
    return check_positions(bus, quiet_s, positions_of(read), unknown_behind=True)


@dataclass(frozen=True)
class BusStart:
    """A run this process started on the bus (start_on_bus): StartRun's first event and the run's
    subscription. A feed follows it (run_feed.RunFeed.start_listened), as does a reader of its
    whole log (the LangGraph, AG-UI and AI SDK mounts' streams, LangGraph's runs.wait: `follow`,
    the first event, then the bus, then at a doubt the runtime's stream). Held until `close`,
    which its starter calls when the reading ends, whether or not it began (`held`)."""

    first: Sequence[events_pb2.RunEvent]
    listening: Listening

    async def follow(self, rest: Callable[[], Batches], outcome: Callable[[str], None]) -> Batches:
        """The run's batches from its start; `rest` and `outcome` as follow_listened's."""
        bus_part = follow_listened(self.listening, rest, outcome)
        began = False  # follow_listened, once it began, closes the subscription and tells
        try:
            yield self.first
            began = True
            async with contextlib.aclosing(bus_part) as batches:
                async for batch in batches:
                    yield batch
        finally:
            if not began:  # left at the first event (its starter may have closed it already)
                self.listening.close()
                outcome("left")

    def close(self) -> None:
        self.listening.close()


async def start_on_bus(
    bus: EventBus | None,
    start: Callable[[rs.StartRunRequest], Awaitable[rs.StartRunResponse]],
    request: rs.StartRunRequest,
) -> tuple[rs.StartRunResponse, BusStart | None] | None:
    """StartRun under an id this process made and listens on: the answer, and the run started on
    the bus when it is to be followed there (None for a replayed start or a runtime that does
    not take `run_id`: their runs are followed on the runtime's stream). None without a bus to
    follow on (none, its connection down, or Redis slower to confirm than SUBSCRIBE_WAIT_S):
    nothing was started, the caller starts the run on the runtime's stream instead."""
    if bus is None or not bus.connected:
        return None
    run_id = new_id("run")
    listening = Listening(bus, run_id)
    try:
        if not await listening.confirmed():
            listening.close()
            return None
        request.run_id = run_id
        resp = await start(request)
    except BaseException:
        listening.close()
        raise
    if resp.run.id != run_id or not resp.events:
        listening.close()
        return resp, None
    listening.sub.position = resp.events[-1].sequence  # delivered from the answer
    return resp, BusStart(list(resp.events), listening)


async def start_followed(
    bus: EventBus | None,
    start: Callable[[rs.StartRunRequest], Awaitable[rs.StartRunResponse]],
    request: rs.StartRunRequest,
) -> tuple[rs.StartRunResponse, BusStart | None]:
    """StartRun for a caller that reads the run's log from its start: on the bus where there is
    one (start_on_bus), with what to follow it by; else (no bus, Redis slow to confirm, a
    replayed start, a runtime older than `run_id`) plainly, None: the runtime's stream follows."""
    on_bus = await start_on_bus(bus, start, request)
    return (await start(request), None) if on_bus is None else on_bus


@contextlib.contextmanager
def held(on_bus: BusStart | None) -> Iterator[None]:
    """Release a run's bus subscription when its reading ends, or never began (a lookup failed
    between the start and the stream)."""
    try:
        yield
    finally:
        if on_bus is not None:
            on_bus.close()
