"""One upstream per run per gateway process, shared by every SSE connection of that run on this
process (DESIGN section 9: "one per run per pod, shared"): a StreamRunEvents call, or, for a run
this process started with a streaming POST, the Redis bus (bus_feed.py).

A RunFeed encodes each event once (`sse_frame`) and keeps the most recent frames in a bounded
ring. A connection joins with its resume point `after`: the ring's frames past `after` are copied
into its buffer and it is added to the fan-out in the same synchronous step (no await between),
so it sees every later frame exactly once, in order, with no gap. A resume point older than the
ring gets a dedicated feed: the same class with an empty ring and one subscriber, its own upstream
call from that point, which hands its subscriber over to the run's shared feed once that feed's
ring reaches back to its position (a far-behind resume costs an upstream call only while it
catches up).

The upstream call reopens from its last sequence when the runtime ends it without a terminal
event (UNAVAILABLE/CANCELLED). A feed closes after delivering the run's terminal event, when its
upstream fails for good, or (shared) a few seconds after its last subscriber left (a client that
was dropped or lost its connection and comes back meanwhile is served from the ring); a dedicated
feed closes as soon as its subscriber leaves or is handed over."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from tether.runtime.v1 import events_pb2
from tether_common.event_json import TERMINAL_TYPES, sse_frame
from tether_proto import wire

from tether_gateway.bus_feed import Batches, BusStart, Listening, follow_listened
from tether_gateway.runtime_client import Credential, OpenedRun, finish, follow_events

if TYPE_CHECKING:
    from tether_gateway.runtime_client import RuntimeClient

log = logging.getLogger(__name__)

TERMINAL_STATUSES = wire.TERMINAL_RUN_STATUS_VALUES
RING_FRAMES = 1024
RING_BYTES = 512 * 1024
LINGER_S = 5.0


class Subscriber(Protocol):
    """An SSE connection as a feed sees it (sse.EventStream)."""

    def offer(self, data: bytes, count: int) -> bool:
        """Queue frames; False when the connection was dropped (it then leaves the feed)."""

    def source_ended(self, error: BaseException | None) -> None:
        """No more frames will come (the run ended, or the upstream failed for good)."""

    def joined(self, feed: RunFeed) -> None:
        """`feed` serves this connection from now on (on joining, and on a hand-over)."""


class RunFeed:
    """The upstream of one run: a ring of recent frames and the connections following it. Shared
    (the registry's feed of the run), or dedicated (`shared=False`: no ring, one subscriber)."""

    def __init__(
        self,
        registry: FeedRegistry,
        run_id: str,
        token: Credential,
        after: int,
        *,
        shared: bool = True,
        ring_frames: int = RING_FRAMES,
        ring_bytes: int = RING_BYTES,
    ) -> None:
        self.registry = registry
        self.run_id = run_id
        self.shared = shared
        self.token = token  # the freshest joiner's token, used when the upstream reopens
        self.floor = after  # the ring holds every event with floor < sequence <= last
        self.last = after
        self.ring: deque[tuple[int, bytes]] = deque()
        self.ring_size = 0
        self.ring_frames = ring_frames
        self.ring_bytes = ring_bytes
        self.subscribers: dict[Subscriber, int] = {}  # -> its position (last sequence queued)
        self.closed = False
        self._task: asyncio.Task[None] | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._listening: Listening | None = None  # a run followed on the bus (bus_feed.py)

    # -- joining and leaving (synchronous: no await between the ring copy and the fan-out) --

    def covers(self, after: int) -> bool:
        """A connection resuming after `after` can be served from the ring, then live."""
        return not self.closed and self.floor <= after

    def join(self, sub: Subscriber, after: int, token: Credential) -> None:
        if not self.covers(after):
            raise ValueError("the feed's ring does not cover this resume point")
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self.token = token
        backlog = [frame for seq, frame in self.ring if seq > after]
        # A resume point ahead of this feed (it lags the runtime by a moment) skips up to it.
        self.subscribers[sub] = max(after, self.last)
        sub.joined(self)
        if backlog and not sub.offer(b"".join(backlog), len(backlog)):
            self.leave(sub)

    def leave(self, sub: Subscriber) -> None:
        self.subscribers.pop(sub, None)
        self._linger_if_idle()

    def _linger_if_idle(self) -> None:
        if not self.subscribers and not self.shared:
            self.close()  # nobody else can join a dedicated feed
        elif not self.subscribers and not self.closed and self._linger is None:
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(self.registry.linger_s, self._idle_close)

    def _idle_close(self) -> None:
        self._linger = None
        if not self.subscribers:
            self.close()

    def close(self, error: BaseException | None = None) -> None:
        """End the feed: its subscribers finish what they have queued and end."""
        if self.closed:
            return
        self.closed = True
        self.registry.forget(self)
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        subs, self.subscribers = list(self.subscribers), {}
        for sub in subs:
            sub.source_ended(error)
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        if self._listening is not None:
            self._listening.close()  # (its follower may never have run)

    # -- the upstream --

    def start(self, opened: OpenedRun | None = None) -> None:
        """Follow the run upstream: on `opened` (the call that started it) when given. Its first
        message, already read, goes into the ring now, once: the starter's connection, joining
        next, sends it with its first write (sse.EventStream.serve), and the call is followed
        from its second message on. A feed started before anyone joined it lingers as one
        everybody left."""
        self.registry.metrics_upstream(1)
        if opened is not None and opened.first.events:
            ended = self._deliver(opened.first.events)
            opened.first.ClearField("events")  # delivered: follow_events must not yield it again
            if ended:
                self._start_task(self._close_after_status(opened))
                return
        self._start_task(self._pump(self._from_runtime(opened)))

    def start_listened(self, started: BusStart) -> None:
        """Follow a run this process started on the bus (bus_feed.py): its first event, from
        StartRun's answer, goes into the ring now, as `start` puts a started call's first
        message; the rest comes from the bus, or from the runtime's stream after a doubt."""
        self.registry.metrics_upstream(1)
        self._listening = started.listening
        self._deliver(started.first)  # a new run's run_started: never its end
        stream = follow_listened(started.listening, self._from_runtime, self.registry.metrics_bus)
        self._start_task(self._pump(stream))

    def _from_runtime(self, opened: OpenedRun | None = None) -> Batches:
        return follow_events(
            self.registry.client, self.run_id, self.token, lambda: self.last, opened
        )

    def _start_task(self, coro: Coroutine[Any, Any, None]) -> None:
        self._task = asyncio.create_task(coro, name=f"run-feed-{self.run_id}")
        self._task.add_done_callback(self._pump_done)
        self._linger_if_idle()

    async def _close_after_status(self, opened: OpenedRun) -> None:
        """The run ended in the call's first message: the call has only its status left to send
        (read, as follow_events does at a run's end), and the feed closes, its frames delivered
        to whoever joined meanwhile."""
        try:
            await finish(opened.call)
        finally:
            opened.call.cancel()  # a no-op once the call has its status
        self.close()

    def _pump_done(self, task: asyncio.Task[None]) -> None:
        self.registry.metrics_upstream(-1)
        if task.cancelled():
            self.close()
            return
        err = task.exception()
        if isinstance(err, grpc.aio.AioRpcError):
            log.warning("run feed ended by the runtime: %s", err.code().name)
        elif err is not None:
            log.error("run feed failed", exc_info=err)
        self.close(err)

    async def _pump(self, stream: Batches) -> None:
        async with contextlib.aclosing(stream):
            async for events in stream:
                if self._deliver(events):
                    self.close()
                    return
                if self.closed or self._hand_over():
                    return  # a dedicated feed's subscriber left, or follows the shared feed

    def _hand_over(self) -> bool:
        """A dedicated feed whose subscriber has caught up with what the run's shared feed holds
        (or whose run has no shared feed left) moves it there and closes. Synchronous: nothing
        arrives between the two."""
        if self.shared or not self.subscribers:
            return False
        [(sub, position)] = self.subscribers.items()
        if self.registry.join_shared(self.run_id, sub, position, self.token) is None:
            return False
        self.subscribers.clear()
        self.close()
        return True

    def _deliver(self, events: Sequence[events_pb2.RunEvent]) -> bool:
        """Encode a batch once, keep it in the ring, fan it out. True after the terminal event."""
        frames: list[tuple[int, bytes]] = []
        end = False
        for ev in events:
            kind = ev.WhichOneof("event")
            if kind == "reset":
                # The feed's position was not in the log (retention): every follower redraws from
                # the run's state, and the log continues after it.
                self._fan_out([(0, sse_frame(ev))], positional=False)
                self.ring.clear()
                self.ring_size = 0
                self.floor = self.last = ev.reset.run.last_sequence
                for sub in self.subscribers:
                    self.subscribers[sub] = max(self.subscribers[sub], self.last)
                if ev.reset.run.status in TERMINAL_STATUSES:
                    end = True
                    break
                continue
            if ev.sequence <= self.last:
                continue  # already delivered by this feed
            frames.append((ev.sequence, sse_frame(ev)))
            self.last = ev.sequence
            if kind in TERMINAL_TYPES:
                end = True
                break
        if frames:
            self._remember(frames)
            self._fan_out(frames, positional=True)
        return end

    def _remember(self, frames: list[tuple[int, bytes]]) -> None:
        if not self.ring_frames:  # an empty ring (a dedicated feed's) holds nothing past `last`
            self.floor = self.last
            return
        ring = self.ring
        for item in frames:
            ring.append(item)
            self.ring_size += len(item[1])
        while ring and (len(ring) > self.ring_frames or self.ring_size > self.ring_bytes):
            seq, frame = ring.popleft()
            self.ring_size -= len(frame)
            self.floor = seq

    def _fan_out(self, frames: list[tuple[int, bytes]], *, positional: bool) -> None:
        first, last = frames[0][0], frames[-1][0]
        shared = b"".join(frame for _, frame in frames)  # one buffer for every connection
        dropped: list[Subscriber] = []
        for sub, position in self.subscribers.items():
            if not positional:
                ok = sub.offer(shared, len(frames))
            elif position < first:
                ok = sub.offer(shared, len(frames))
            elif position < last:  # joined ahead of this feed: only what it has not seen
                rest = [frame for seq, frame in frames if seq > position]
                ok = sub.offer(b"".join(rest), len(rest))
            else:
                continue
            if ok and positional:
                self.subscribers[sub] = last
            elif not ok:
                dropped.append(sub)
        for sub in dropped:
            self.leave(sub)


class FeedRegistry:
    """The feeds of one gateway process (one app), by run id."""

    def __init__(
        self,
        client: Callable[[], RuntimeClient],
        *,
        linger_s: float = LINGER_S,
        on_upstream: Callable[[int], None] | None = None,
        on_bus: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.linger_s = linger_s
        self.feeds: dict[str, RunFeed] = {}
        self._on_upstream = on_upstream
        self._on_bus = on_bus

    def metrics_upstream(self, delta: int) -> None:
        if self._on_upstream is not None:
            self._on_upstream(delta)

    def metrics_bus(self, outcome: str) -> None:
        """How a run's following on the bus ended (bus_feed.follow_listened)."""
        if self._on_bus is not None:
            self._on_bus(outcome)

    def subscribe(self, run_id: str, sub: Subscriber, after: int, token: Credential) -> RunFeed:
        """Join the run's shared feed, or, when its ring does not reach back to `after`, a
        dedicated feed of the connection's own from `after` (handed over once caught up)."""
        feed = self.join_shared(run_id, sub, after, token)
        if feed is None:
            feed = RunFeed(self, run_id, token, after, shared=False, ring_frames=0, ring_bytes=0)
            feed.join(sub, after, token)
            feed.start()
        return feed

    def join_shared(
        self, run_id: str, sub: Subscriber, after: int, token: Credential
    ) -> RunFeed | None:
        """Join the run's shared feed (creating it when there is none); None when the existing
        feed's ring does not reach back to `after`."""
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = RunFeed(self, run_id, token, after)
            self.feeds[run_id] = feed
            feed.join(sub, after, token)
            feed.start()
            return feed
        if not feed.covers(after):
            return None
        feed.join(sub, after, token)
        return feed

    def adopt(self, run_id: str, token: Credential, opened: OpenedRun) -> None:
        """Make the call that started a run (StartRunAndStreamEvents) the run's feed, for its
        starter's connection to join from sequence 0 as any other. A feed this process already
        has for the run (a replayed start) makes the call redundant. A feed nobody joins closes
        after the linger, as one everybody left."""
        if run_id in self.feeds:
            opened.close()
            return
        feed = RunFeed(self, run_id, token, 0)
        self.feeds[run_id] = feed
        feed.start(opened)

    def adopt_listened(self, run_id: str, token: Credential, started: BusStart) -> None:
        """Make a run this process started on the bus the run's feed, as `adopt` does a call."""
        if run_id in self.feeds:  # (a new id: only if the same start were adopted twice)
            started.close()
            return
        feed = RunFeed(self, run_id, token, 0)
        self.feeds[run_id] = feed
        feed.start_listened(started)

    def forget(self, feed: RunFeed) -> None:
        if self.feeds.get(feed.run_id) is feed:
            del self.feeds[feed.run_id]

    def close_all(self) -> None:
        for feed in list(self.feeds.values()):
            feed.close()
