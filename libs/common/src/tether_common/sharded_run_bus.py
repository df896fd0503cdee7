"""Fan-out through a Redis Cluster: sharded pub/sub (SPUBLISH / SSUBSCRIBE, Redis 7). A run's
channel lives on the master that owns its slot, so publishing costs one node, not a broadcast to
all of them (classic PUBLISH in a cluster is copied to every node). Each process keeps ONE
subscriber connection per master that holds channels it follows, and fans out in-process, as the
plain bus does.

Failover: when a master dies (its connection drops) or gives its slots away (the server ends our
subscriptions with SUNSUBSCRIBE), the shard's channels are re-homed by a fresh slot map on
whichever master owns them now, and their streams count as quiet, so the next positioning check
(one query for all of them) finds what was published meanwhile. Nothing is lost: Postgres has it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.event import (
    AsyncAfterSlotsCacheRefreshEvent,
    AsyncEventListenerInterface,
    EventDispatcher,
)

from tether_common import redis_conn, task_stop
from tether_common.event_wait import wait_set
from tether_common.run_bus import RECONNECT, SUBSCRIBE_WAIT_S, EventBus, Subscription, channel

log = logging.getLogger(__name__)


class _SlotsMoved(Exception):
    """The node ended a subscription we still want: its slots went to another master."""


class _Shard:
    """One master's subscriber connection and the channels this process follows on it."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name, self.host, self.port = name, host, port
        self.channels: set[str] = set()
        self.dirty: set[str] = set()  # channels whose state the node has yet to hear of
        self.leaving: set[str] = set()  # our own SUNSUBSCRIBEs, awaiting their confirmation
        self.client: Any = None
        self.pubsub: PubSub | None = None
        self.lock = asyncio.Lock()
        self.reader: asyncio.Task[None] | None = None
        self.flusher: asyncio.Future[None] | None = None
        self.down = False  # lost and not yet back: a new stream does not wait for it
        self.retired = False

    @property
    def connected(self) -> bool:
        ps = self.pubsub
        return ps is not None and getattr(ps, "connection", None) is not None


class _Rehome(AsyncEventListenerInterface):
    def __init__(self, bus: ShardedEventBus) -> None:
        self._bus = bus

    async def listen(self, event: object) -> None:
        self._bus._rehome_all()


class ShardedEventBus(EventBus):
    def __init__(self, url: str, *, drop_every: int = 0) -> None:
        # The publishing client re-reads the slot map when a command meets a dead or demoted
        # master; it tells us, and channels follow their slots at once, before the subscriber
        # connection to that master has even noticed (a blackholed node may never say so).
        slots_changed = EventDispatcher()
        slots_changed.register_listeners({AsyncAfterSlotsCacheRefreshEvent: [_Rehome(self)]})
        # A socket timeout still bounds the slot map's reads (each publish is bounded as a whole).
        super().__init__(
            url, drop_every=drop_every, socket_timeout=2, event_dispatcher=slots_changed
        )
        self._shards: dict[str, _Shard] = {}
        self._owner: dict[str, str] = {}  # channel -> the shard that holds it
        self._homeless: set[str] = set()  # wanted channels no known master owns yet
        self._rehoming: asyncio.Future[None] | None = None
        self._rebalance_lock = asyncio.Lock()
        self._closing: set[asyncio.Future[None]] = set()
        self._node_options = {
            k: v for k, v in redis_conn.cluster_options(url).items() if k != "startup_nodes"
        }

    async def start(self) -> None:
        # The slot map before the first stream, so its channel goes straight to its master.
        try:
            await self._pub.initialize()
        except redis_conn.ERRORS as err:
            log.warning("redis cluster unreachable at start; retrying as streams open: %s", err)

    async def close(self) -> None:
        tasks = [self._rehoming] + [t for s in self._shards.values() for t in (s.reader, s.flusher)]
        for task in tasks:
            await task_stop.stop(task)
        for shard in self._shards.values():
            await _close(shard)
        await self._pub.aclose()

    def _send(self, target: Any, name: str, data: bytes) -> Any:
        return target.spublish(name, data)

    @property
    def connected(self) -> bool:
        return bool(self._shards) and all(s.connected for s in self._shards.values())

    async def confirmed(self, sub: Subscription) -> bool:
        """As the plain bus, per shard: no wait while the channel's master is lost or unknown."""
        if sub.subscribed.is_set():
            return True
        shard = self._shards.get(self._owner.get(channel(sub.run_id), ""))
        if shard is None or shard.down:
            return False
        return await wait_set(sub.subscribed, SUBSCRIBE_WAIT_S)

    def _changed(self, name: str) -> None:
        if name in self._subs:
            self._home(name)
            return
        self._homeless.discard(name)
        shard = self._shards.get(self._owner.pop(name, ""))
        if shard is not None:
            shard.channels.discard(name)
            self._tell(shard, name)

    def _home(self, name: str) -> None:
        """Put a wanted channel on the shard of the master that owns its slot."""
        try:
            node = self._pub.get_node_from_key(name)
        except (*redis_conn.ERRORS, IndexError, KeyError, AttributeError):
            node = None  # the slot map is not loaded yet, or the slot is not covered
        if node is None:
            self._homeless.add(name)
            if self._rehoming is None or self._rehoming.done():
                self._rehoming = asyncio.ensure_future(self._rehome_forever())
            return
        self._homeless.discard(name)
        current = self._owner.get(name)
        if current == node.name:
            return
        old = self._shards.get(current or "")
        if old is not None:
            old.channels.discard(name)
            self._tell(old, name)
            self._count_quiet([name])  # what the old master got meanwhile went nowhere
            if name in self._confirmed:
                # A stream that opens now must wait for the new master's confirmation, as the
                # first one did for the old master's (the old event stays set for the streams
                # already following, whom the positioning check covers).
                self._confirmed[name] = asyncio.Event()
        shard = self._shards.get(node.name)
        if shard is None:
            shard = self._shards[node.name] = _Shard(node.name, node.host, node.port)
            shard.reader = asyncio.create_task(self._read_shard(shard), name="bus-shard-reader")
        shard.channels.add(name)
        self._owner[name] = node.name
        self._tell(shard, name)

    def _tell(self, shard: _Shard, name: str) -> None:
        """As the plain bus: changes made while a round trip is in flight go out together."""
        shard.dirty.add(name)
        if shard.flusher is None or shard.flusher.done():
            shard.flusher = asyncio.ensure_future(self._flush(shard))

    async def _flush(self, shard: _Shard) -> None:
        async with shard.lock:
            while shard.dirty:
                names, shard.dirty = shard.dirty, set()
                ps = shard.pubsub
                if ps is None or not shard.connected:
                    return  # the reader subscribes to everything current when it (re)connects
                wanted = [n for n in names if n in shard.channels]
                unwanted = [n for n in names if n not in shard.channels]
                try:
                    # One SSUBSCRIBE per slot: a command naming channels of two slots is refused
                    # (CROSSSLOT). They are written back to back, not waited on one by one.
                    for group in _by_slot(wanted):
                        await ps.ssubscribe(*group)
                    for group in _by_slot(unwanted):
                        shard.leaving.update(group)
                        await ps.sunsubscribe(*group)
                except redis_conn.ERRORS as err:
                    # The master went away under the change (its reader re-homes the shard when
                    # it notices): what these streams miss meanwhile, the positioning check finds.
                    log.warning("sharded pubsub change failed: %s", err)
                    self._count_quiet(wanted)

    async def _read_shard(self, shard: _Shard) -> None:
        attempt = 0
        while not shard.retired:
            try:
                async with shard.lock:
                    # No retry inside redis-py: a lost master must surface here at once, to be
                    # re-homed, not be reconnected to (and resubscribed on) for seconds.
                    shard.client = aioredis.Redis(
                        host=shard.host, port=shard.port, socket_connect_timeout=2,
                        retry=Retry(NoBackoff(), 0), **self._node_options,
                    )  # fmt: skip
                    shard.pubsub = ps = shard.client.pubsub()
                    shard.dirty.clear()
                    shard.leaving.clear()
                    # A channel of this node's own keeps the connection subscribed while idle.
                    await ps.ssubscribe(self._placeholder(shard))
                    for group in _by_slot(sorted(shard.channels)):
                        await ps.ssubscribe(*group)
                # A connection silent even to a PING is lost (a partition, a frozen master):
                # re-homed like one that raised (redis_conn.SilenceWatch).
                with redis_conn.SilenceWatch(ps) as watch:
                    while True:
                        msg = await watch.read()
                        if msg is not None:
                            if attempt:
                                attempt, shard.down = 0, False
                            if msg["type"] != "pong":
                                self._take(shard, msg)
            except asyncio.CancelledError:
                raise
            except (*redis_conn.ERRORS, _SlotsMoved) as err:
                log.warning("sharded pubsub on %s lost, re-homing: %r", shard.name, err)
                shard.down = True
                await _close(shard)
                attempt += 1
                await asyncio.sleep(RECONNECT.delay(attempt))
                self._count_quiet(shard.channels)
                await self._rebalance()

    def _take(self, shard: _Shard, msg: dict[str, Any]) -> None:
        kind, name = msg["type"], msg["channel"].decode()
        if kind == "smessage":
            now = time.monotonic()
            for sub in list(self._subs.get(name, ())):
                sub.last_heard = now
                sub.offer(msg["data"])
        elif kind == "ssubscribe":
            event = self._confirmed.get(name)
            if event is not None and name in shard.channels:
                event.set()
        elif kind == "sunsubscribe":
            if name in shard.leaving:
                shard.leaving.discard(name)
            else:
                # Not ours: the node lost the slot (a failover made it a replica, or the slot
                # migrated). Start over from a fresh slot map.
                raise _SlotsMoved(name)

    def _placeholder(self, shard: _Shard) -> str:
        for i in range(16384):
            name = f"tether:hello:{{{i}}}"
            with contextlib.suppress(*redis_conn.ERRORS, IndexError, KeyError, AttributeError):
                if self._pub.get_node_from_key(name).name == shard.name:
                    return name
        return "tether:hello"  # a node that owns no slot: refused, and the shard re-homes

    def _count_quiet(self, names: set[str] | list[str]) -> None:
        """Batches may have passed these channels' streams by while their shard was down or
        moving: make them due for the next positioning check (one query for all of them)
        instead of waiting out its interval."""
        for name in names:
            for sub in self._subs.get(name, ()):
                sub.last_heard = 0.0

    async def _rebalance(self) -> None:
        """Re-read the slot map and move every channel to its master's shard."""
        async with self._rebalance_lock:
            try:
                await redis_conn.refresh_slots(self._pub)  # tells _Rehome, which re-homes
            except redis_conn.ERRORS as err:
                log.warning("redis cluster slot map unavailable: %s", err)
                return
            self._rehome_all()

    def _rehome_all(self) -> None:
        """Every wanted channel to the shard of its master by the current slot map; a shard of a
        node that is no master any more, and holds nothing, is retired."""
        for name in list(self._subs):
            self._home(name)
        primaries = {n.name for n in self._pub.get_primaries()}
        for shard in list(self._shards.values()):
            if shard.channels or shard.name in primaries:
                continue
            shard.retired = True
            del self._shards[shard.name]
            if shard.reader is not None and shard.reader is not asyncio.current_task():
                shard.reader.cancel()
            closing = asyncio.ensure_future(_close(shard))
            self._closing.add(closing)  # held until done: a bare future may be collected
            closing.add_done_callback(self._closing.discard)

    async def _rehome_forever(self) -> None:
        attempt = 0
        while self._homeless:
            attempt += 1
            await asyncio.sleep(RECONNECT.delay(attempt))
            await self._rebalance()


def _by_slot(names: list[str]) -> list[list[str]]:
    groups: dict[int, list[str]] = defaultdict(list)
    for name in names:
        groups[key_slot(name.encode())].append(name)
    return list(groups.values())


async def _close(shard: _Shard) -> None:
    ps, shard.pubsub = shard.pubsub, None
    client, shard.client = shard.client, None
    if ps is not None:
        with contextlib.suppress(Exception):
            await ps.aclose()  # type: ignore[no-untyped-call]
    if client is not None:
        with contextlib.suppress(Exception):
            await client.aclose()


def event_bus(url: str, *, drop_every: int = 0) -> EventBus:
    """The bus REDIS_URL asks for: sharded through a `redis+cluster://` URL, else the plain one
    (`drop_every`: the chaos suite's lost publishes, run_bus.py)."""
    bus = ShardedEventBus if redis_conn.is_cluster(url) else EventBus
    return bus(url, drop_every=drop_every)
