"""Redis fan-out. Publishing happens after commit and may fail: Postgres stays the truth, and
streams fill any gap from it. Each process keeps ONE subscriber connection and fans out in-process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from tether_common import redis_conn, task_stop
from tether_common.backoff import NO_JITTER, Backoff, Retries
from tether_common.event_batch import batch_from_encoded
from tether_common.event_wait import wait_set
from tether_common.redis_round_trip import RoundTrip

log = logging.getLogger(__name__)

QUEUE_LIMIT = 256  # batches per stream; past it the stream skips and refills from Postgres
# A lost Redis connection is made again after 0.1 s, doubling to 2 s while Redis stays away.
RECONNECT = Backoff(0.1, 2.0, jitter=NO_JITTER)
# The most one publish may hold up the run that made it: Postgres has the events, and streams
# find what a lost publish did not bring. With a Redis Cluster the client retries a command
# through a refreshed slot map, which is what carries a publish over a failover; against a frozen
# master (no reset, no answer) each try would wait out its own socket timeout.
PUBLISH_TIMEOUT_S = 2.0
# The most a subscriber connection's handshake or (un)subscribe may take before the connection is
# given up and dialled again.
COMMAND_TIMEOUT_S = 2.0
SUBSCRIBE_WAIT_S = 1.0  # longest a new stream waits for Redis to confirm its subscription


class _Lost(Exception):
    """The subscriber connection is lost though redis-py raised nothing: redis-py dialled it again
    on its own (and re-subscribed on it, unseen)."""


def channel(run_id: str) -> str:
    return f"tether:run:{run_id}"


class Subscription:
    """One stream's view of a run's live batches. `overflowed` means some were dropped."""

    def __init__(self, run_id: str, subscribed: asyncio.Event) -> None:
        self.run_id = run_id
        # Set once Redis confirmed the channel's subscription: from then on nothing published
        # for the run can pass this process by, so a read of Postgres after it misses nothing.
        self.subscribed = subscribed
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(QUEUE_LIMIT)
        self.overflowed = False
        # The last sequence the stream sent, and when it last heard anything: what the
        # positioning check compares with Postgres.
        self.position = 0
        self.last_heard = 0.0

    def nudge(self) -> None:
        """Ask the stream to compare its position with Postgres (an empty message)."""
        self.offer(b"")

    def offer(self, data: bytes) -> None:
        try:
            self.queue.put_nowait(data)
        except asyncio.QueueFull:
            self.overflowed = True


class EventBus:
    def __init__(
        self,
        url: str,
        *,
        drop_every: int = 0,
        socket_timeout: float | None = None,
        **client_options: Any,
    ) -> None:
        self._url = url
        # Each publish is bounded as a whole (PUBLISH_TIMEOUT_S, _bounded): a socket timeout of
        # the client's own (redis-py's default is 5 s) would arm a timer per command written
        # (and a task, wait_for's) and another per answer read, several per run.
        self._pub = redis_conn.connect(
            url, socket_timeout=socket_timeout, socket_connect_timeout=2, **client_options
        )
        # Publishes go out on a connection of their own, not through redis-py's pipeline
        # (redis_round_trip.py); one overlapping one in flight takes the client's path. A
        # cluster's publishes go to the masters of their channels' slots.
        self._trip = None if redis_conn.is_cluster(url) else RoundTrip(self._pub)
        self._subs: dict[str, set[Subscription]] = defaultdict(set)
        self._confirmed: dict[str, asyncio.Event] = {}
        self._pubsub: aioredis.client.PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._dirty: set[str] = set()  # channels whose subscription Redis has yet to hear of
        self._flusher: asyncio.Future[None] | None = None
        # Channels the current connection subscribed to as it opened: their streams are nudged
        # when Redis confirms them (see _read_forever).
        self._rejoin: set[str] = set()
        self._redialled = False
        self.publish_failures = 0
        # Fault injection for the chaos suite, off by default: `drop_every` N (the setting
        # TETHER_FAULT_DROP_PUBLISH_EVERY, never in production) silently skips every Nth
        # publish, as if Redis had lost the message.
        self._drop_every = drop_every
        self._published = 0

    async def start(self) -> None:
        self._reader = asyncio.create_task(self._read_forever(), name="bus-reader")

    async def close(self) -> None:
        for task in (self._reader, self._flusher):
            await task_stop.stop(task)
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()  # type: ignore[no-untyped-call]
        await self._pub.aclose()

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                return bool(await self._pub.ping())
        except redis_conn.ERRORS:  # TimeoutError is an OSError
            return False

    async def publish(self, run_id: str, encoded: list[bytes]) -> None:
        """Announce committed events. A failure is logged, never raised: the events are safe in
        Postgres and every stream's positioning check will find them."""
        if not encoded or self._fault_drops(run_id):
            return
        await self._bounded(self._announce([(run_id, encoded)]))

    async def _bounded(self, publishing: Awaitable[Any]) -> None:
        """A publish that fails or takes longer than PUBLISH_TIMEOUT_S is counted and logged,
        never raised into the run loop (a cancelled command's connection is dropped by
        redis-py, never reused half read)."""
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                await publishing
        except redis_conn.ERRORS as err:  # TimeoutError is an OSError
            self.publish_failures += 1
            log.warning("publish failed; streams will refill from Postgres: %r", err)

    def _send(self, target: Any, name: str, data: bytes) -> Any:
        """PUBLISH on a client or a pipeline (a Redis Cluster's bus says SPUBLISH instead)."""
        return target.publish(name, data)

    def subscriptions(self) -> list[Subscription]:
        return [sub for subs in self._subs.values() for sub in subs]

    def _fault_drops(self, run_id: str) -> bool:
        if self._drop_every <= 0:
            return False
        self._published += 1
        if self._published % self._drop_every:
            return False
        log.warning("fault injection: publish dropped", extra={"run_id": run_id})
        return True

    async def publish_many(self, batches: list[tuple[str, list[bytes]]]) -> None:
        """Announce several runs' committed events in one pipelined round trip."""
        batches = [
            (run_id, encoded)
            for run_id, encoded in batches
            if encoded and not self._fault_drops(run_id)
        ]
        if batches:
            await self._bounded(self._announce(batches))

    async def _announce(self, batches: list[tuple[str, list[bytes]]]) -> None:
        """One round trip for the batches, raising what any of them met."""
        trip = self._trip
        if trip is not None and not trip.busy:
            commands = [("PUBLISH", channel(r), batch_from_encoded(e)) for r, e in batches]
            for answer in await trip.send(commands):
                if isinstance(answer, ResponseError):
                    raise answer
            return
        if len(batches) == 1:
            ((run_id, encoded),) = batches
            await self._send(self._pub, channel(run_id), batch_from_encoded(encoded))
            return
        async with self._pub.pipeline(transaction=False) as pipe:
            for run_id, encoded in batches:
                self._send(pipe, channel(run_id), batch_from_encoded(encoded))
            await pipe.execute()

    @contextlib.contextmanager
    def subscribe(self, run_id: str) -> Iterator[Subscription]:
        name = channel(run_id)
        first = not self._subs[name]
        if first:
            self._confirmed[name] = asyncio.Event()
        sub = Subscription(run_id, self._confirmed[name])
        self._subs[name].add(sub)
        if first:
            self._changed(name)
        try:
            yield sub
        finally:
            subs = self._subs.get(name)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[name]
                    self._confirmed.pop(name, None)
                    self._changed(name)

    @property
    def connected(self) -> bool:
        """Whether the subscriber connection is up (it connects in the background)."""
        ps = self._pubsub
        return ps is not None and getattr(ps, "connection", None) is not None

    async def confirmed(self, sub: Subscription) -> bool:
        """Wait (briefly) until Redis confirmed the subscription. Without it, a batch published
        between a stream's read of Postgres and its SUBSCRIBE reaching Redis would pass the stream
        by, and if it held the run's last events nothing would arrive to reveal the gap before
        the positioning check. Returns at once, False, while Redis is unreachable."""
        if sub.subscribed.is_set():
            return True
        if not self.connected:
            return False
        return await wait_set(sub.subscribed, SUBSCRIBE_WAIT_S)

    def _changed(self, name: str) -> None:
        """A channel gained its first or lost its last local stream: tell Redis soon. Changes
        made while a round trip is in flight go out together, as ONE SUBSCRIBE (and one
        UNSUBSCRIBE), so a burst of new streams waits for one command, not one each."""
        self._dirty.add(name)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_changes())

    async def _flush_changes(self) -> None:
        async with self._lock:
            while self._dirty:
                names, self._dirty = self._dirty, set()
                ps = self._pubsub
                if ps is None or getattr(ps, "connection", None) is None:
                    return  # the reader subscribes to everything current when it (re)connects
                # What Redis must hear is the channel's state now, whatever happened meanwhile.
                wanted = sorted(n for n in names if n in self._subs)
                unwanted = sorted(n for n in names if n not in self._subs)
                try:
                    async with asyncio.timeout(COMMAND_TIMEOUT_S):
                        if wanted:
                            await ps.subscribe(*wanted)
                        if unwanted:
                            await ps.unsubscribe(*unwanted)
                except redis_conn.ERRORS as err:  # TimeoutError is an OSError
                    log.warning("pubsub change failed: %s", err)

    async def _read_forever(self) -> None:
        """Keep one subscriber connection. Every loss surfaces here (redis-py's own retries are
        off; a re-dial it makes anyway counts as a loss), and each new connection subscribes to
        every current channel, then nudges their streams as Redis confirms each one: what was
        published while the connection was down is in Postgres, and a stream that reads it only
        now misses nothing, since nothing published after the confirmation can pass it by."""
        reconnects = Retries(RECONNECT)
        while True:
            try:
                ps = await self._connect()
                log.debug("pubsub connected, %d channels", len(self._rejoin))
                reconnects.reset()
                await self._listen(ps)
            except asyncio.CancelledError:
                raise
            except (*redis_conn.ERRORS, _Lost) as err:
                log.warning("pubsub connection lost, reconnecting: %s", err)
                lost, self._pubsub = self._pubsub, None
                if lost is not None:
                    with contextlib.suppress(Exception):
                        await lost.aclose()  # type: ignore[no-untyped-call]
                await reconnects.pause()

    async def _connect(self) -> PubSub:
        async with self._lock:
            # No socket timeout: the handshake and each command written are bounded by
            # COMMAND_TIMEOUT_S as a whole (one timer, where redis-py's own would arm one per
            # command and a task for each write), the reads by the SilenceWatch.
            client = aioredis.Redis.from_url(
                self._url,
                socket_connect_timeout=2,
                socket_timeout=None,  # (redis-py's default is 5 s)
                retry=Retry(NoBackoff(), 0),
                **redis_conn.silent_peer_options(self._url),
            )
            self._pubsub = ps = client.pubsub()
            self._rejoin = set(self._subs)
            # A placeholder channel keeps the connection in subscribe mode while idle.
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                await ps.subscribe("tether:hello", *sorted(self._rejoin))
            self._redialled = False
            connection: Any = ps.connection  # made by the subscribe (redis-py types it None)
            connection.register_connect_callback(self._on_redial)
        return ps

    def _on_redial(self, _connection: object) -> None:
        """redis-py dialled the connection again (a command found it closed)."""
        self._redialled = True

    async def _listen(self, ps: PubSub) -> None:
        """Hand each message on until the connection is lost: one that stays silent, even to a
        PING (redis_conn.SilenceWatch), is given up and dialled again; before, the reader kept
        such a connection for good, its streams served only by the positioning check."""
        with redis_conn.SilenceWatch(ps) as watch:
            while True:
                msg = await watch.read()
                if self._redialled:
                    raise _Lost("redis-py dialled the connection again")
                if msg is not None:
                    self._on_message(msg)

    def _on_message(self, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind == "message":
            now = time.monotonic()
            for sub in list(self._subs.get(msg["channel"].decode(), ())):
                sub.last_heard = now
                sub.offer(msg["data"])
        elif kind == "subscribe":
            name = msg["channel"].decode()
            if name in self._confirmed:
                self._confirmed[name].set()
            if name in self._rejoin:
                self._rejoin.discard(name)
                for sub in list(self._subs.get(name, ())):
                    sub.nudge()


# What a positioning check's reader gives: each run's last stored sequence, or None when it could
# not read them this round.
Positions = Callable[[set[str]], Awaitable["dict[str, int] | None"]]


async def check_positions(
    bus: EventBus, interval_s: float, positions: Positions, *, unknown_behind: bool
) -> None:
    """Centrifugo's positioning check, batched, for every follower of the bus (a runtime's
    streams, a gateway's feeds): once per interval ONE read (`positions`) of the last sequence
    of every run whose subscription heard nothing for as long; each one behind it (a lost
    publish, even of the last event) is nudged, and its follower fills from Postgres. A run the
    answer leaves out, or every quiet run when `positions` could not read (None), counts as
    behind when `unknown_behind` (a gateway's feed then goes over to the runtime's stream, which
    knows); otherwise it is checked again next round (a runtime's own stream would only read a
    store that is away). A failed round never ends the task: nothing restarts it."""
    while True:
        await asyncio.sleep(interval_s)
        cutoff = time.monotonic() - interval_s
        quiet = [s for s in bus.subscriptions() if s.last_heard <= cutoff]
        if not quiet:
            continue
        latest = await positions({s.run_id for s in quiet})
        if latest is None and not unknown_behind:
            continue
        unknown = sys.maxsize if unknown_behind else 0
        behind = [s for s in quiet if (latest or {}).get(s.run_id, unknown) > s.position]
        for sub in behind:
            sub.nudge()
        if behind and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "positioning check: %d quiet, %d behind (run, sent, stored): %s",
                len(quiet), len(behind),
                [(s.run_id, s.position, (latest or {}).get(s.run_id)) for s in behind],
            )  # fmt: skip
