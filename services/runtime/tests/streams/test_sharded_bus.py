"""The runtime's fan-out through a real Redis Cluster (three masters, one replica each): sharded
pub/sub, one subscriber connection per master, and a failover that streams ride out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio.cluster import RedisCluster
from tether_common import redis_conn
from tether_common.run_bus import Subscription, channel
from tether_common.sharded_run_bus import ShardedEventBus, event_bus
from tether_testkit.redis_cluster import RedisClusterNodes, redis_cluster


@pytest.fixture(scope="module")
def shared() -> Iterator[RedisClusterNodes]:
    """For the tests that leave the cluster as they found it."""
    with redis_cluster() as nodes:
        yield nodes


@pytest.fixture
def cluster() -> Iterator[RedisClusterNodes]:
    """One per test: the failover tests leave it with a dead or demoted master."""
    with redis_cluster() as nodes:
        yield nodes


async def _bus(cluster: RedisClusterNodes) -> AsyncIterator[ShardedEventBus]:
    made = event_bus(cluster.url)
    assert isinstance(made, ShardedEventBus)
    await made.start()
    yield made
    await made.close()


@pytest.fixture
async def bus(cluster: RedisClusterNodes) -> AsyncIterator[ShardedEventBus]:
    async for made in _bus(cluster):
        yield made


@pytest.fixture
async def shared_bus(shared: RedisClusterNodes) -> AsyncIterator[ShardedEventBus]:
    async for made in _bus(shared):
        yield made


def _runs_on_every_master(cluster: RedisClusterNodes, per_master: int) -> dict[int, list[str]]:
    """Run ids whose channels land on each master (port -> ids)."""
    found: dict[int, list[str]] = {n.port: [] for n in cluster.nodes[: cluster.masters]}
    i = 0
    while any(len(ids) < per_master for ids in found.values()):
        run_id = f"run_{i}"
        ids = found[cluster.master_of(channel(run_id)).port]
        if len(ids) < per_master:
            ids.append(run_id)
        i += 1
    return found


async def _hears(bus: ShardedEventBus, sub: Subscription, payload: bytes) -> None:
    """Publish until the subscription hears it: after a failover the channel takes a moment to
    be re-homed, and what was published before that is Postgres's to fill (not tested here)."""
    async with asyncio.timeout(20):
        while True:
            await bus.publish(sub.run_id, [payload])
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.2):
                    while await sub.queue.get() != _batch(payload):
                        pass
                    return


def _batch(payload: bytes) -> bytes:
    from tether_runtime.domain.events import batch_from_encoded

    return batch_from_encoded([payload])


async def _shard_subscribers(cluster: RedisClusterNodes, run_id: str) -> int:
    node = cluster.master_of(channel(run_id))
    counts = node.client().execute_command("PUBSUB", "SHARDNUMSUB", channel(run_id))
    return int(counts[1])


@pytest.mark.process  # starts a process: not in test-fast
async def test_runs_fan_out_over_sharded_pubsub_with_one_connection_per_master(
    shared: RedisClusterNodes, shared_bus: ShardedEventBus
) -> None:
    cluster, bus = shared, shared_bus
    by_master = _runs_on_every_master(cluster, 4)
    with contextlib.ExitStack() as stack:
        subs = [stack.enter_context(bus.subscribe(r)) for ids in by_master.values() for r in ids]
        assert all(await asyncio.gather(*(bus.confirmed(s) for s in subs)))
        # One subscriber connection per master that holds a channel, not one per stream.
        assert sorted(s.port for s in bus._shards.values()) == sorted(by_master)
        for port in by_master:
            clients = cluster.node_at(port).client().client_list(_type="pubsub")
            assert len(clients) == 1, clients
        # Each channel is subscribed on its own master only (SPUBLISH reaches that node alone).
        for sub in subs:
            assert await _shard_subscribers(cluster, sub.run_id) == 1
        # publish_many pipelines across masters; each stream hears its own batch, once.
        await bus.publish_many([(s.run_id, [s.run_id.encode()]) for s in subs])
        for sub in subs:
            assert await asyncio.wait_for(sub.queue.get(), 5) == _batch(sub.run_id.encode())
            assert sub.queue.empty()
        assert bus.publish_failures == 0
    # The last stream of each run left: its master is told.
    async with asyncio.timeout(10):
        while any([await _shard_subscribers(cluster, s.run_id) for s in subs]):
            await asyncio.sleep(0.05)


@pytest.mark.process  # starts a process: not in test-fast
async def test_a_confirmed_subscription_misses_nothing_published_after(
    shared_bus: ShardedEventBus,
) -> None:
    bus = shared_bus
    for i in range(20):  # each a channel of its own slot, on any master
        with bus.subscribe(f"run_confirm_{i}") as sub:
            assert await bus.confirmed(sub)
            await bus.publish(sub.run_id, [b"\x08\x01"])  # no sleep between
            assert await asyncio.wait_for(sub.queue.get(), 5) == _batch(b"\x08\x01")


@pytest.mark.process  # starts a process: not in test-fast
async def test_a_killed_master_s_streams_move_to_its_promoted_replica(
    cluster: RedisClusterNodes, bus: ShardedEventBus
) -> None:
    by_master = _runs_on_every_master(cluster, 2)
    victim_port = next(iter(by_master))
    with contextlib.ExitStack() as stack:
        subs = {r: stack.enter_context(bus.subscribe(r)) for ids in by_master.values() for r in ids}
        assert all(await asyncio.gather(*(bus.confirmed(s) for s in subs.values())))
        victim = cluster.node_at(victim_port)
        replica = cluster.replica_of(victim)
        cluster.kill(victim)
        await asyncio.to_thread(cluster.wait_ok)  # the replica was promoted
        assert cluster.master_of(channel(by_master[victim_port][0])) is replica
        for run_id in by_master[victim_port]:
            sub = subs[run_id]
            await _hears(bus, sub, b"after-failover")
            assert await _shard_subscribers(cluster, run_id) == 1
        for ids in by_master.values():
            for run_id in ids:
                await _hears(bus, subs[run_id], b"everyone")
        # The dead master's shard is gone; the promoted replica holds its channels.
        assert victim.port not in {s.port for s in bus._shards.values()}
        assert replica.port in {s.port for s in bus._shards.values()}


@pytest.mark.process  # starts a process: not in test-fast
async def test_streams_of_a_lost_shard_are_due_for_the_positioning_check(
    cluster: RedisClusterNodes, bus: ShardedEventBus
) -> None:
    """What was published while a master was down is in Postgres only: its streams must be
    compared with Postgres at the next positioning check, not one quiet interval later."""
    by_master = _runs_on_every_master(cluster, 1)
    victim_port, spared_port = list(by_master)[:2]
    with bus.subscribe(by_master[victim_port][0]) as lost:
        with bus.subscribe(by_master[spared_port][0]) as spared:
            assert await bus.confirmed(lost) and await bus.confirmed(spared)
            lost.last_heard = spared.last_heard = 1e12  # "just now", whatever the clock says
            cluster.kill(cluster.node_at(victim_port))
            async with asyncio.timeout(10):
                while lost.last_heard != 0.0:
                    await asyncio.sleep(0.05)
            assert spared.last_heard == 1e12


@pytest.mark.process  # starts a process: not in test-fast
async def test_a_planned_switch_over_moves_the_channels_with_their_slots(
    cluster: RedisClusterNodes, bus: ShardedEventBus
) -> None:
    """CLUSTER FAILOVER: the old master lives on as a replica and ends our subscriptions
    itself (SUNSUBSCRIBE from the server); the bus follows the slots to the new master."""
    by_master = _runs_on_every_master(cluster, 2)
    port = next(iter(by_master))
    with contextlib.ExitStack() as stack:
        subs = [stack.enter_context(bus.subscribe(r)) for r in by_master[port]]
        assert all(await asyncio.gather(*(bus.confirmed(s) for s in subs)))
        old = cluster.node_at(port)
        new = cluster.replica_of(old)
        cluster.fail_over(new)
        async with asyncio.timeout(20):
            while cluster.master_of(channel(subs[0].run_id)) is not new:
                await asyncio.sleep(0.05)
        await asyncio.to_thread(cluster.wait_ok)
        for sub in subs:
            await _hears(bus, sub, b"switched")
            assert await _shard_subscribers(cluster, sub.run_id) == 1


async def test_confirmation_does_not_wait_while_the_cluster_is_unreachable() -> None:
    bus = ShardedEventBus("redis+cluster://127.0.0.1:9")  # nothing listens on the discard port
    await bus.start()
    try:
        with bus.subscribe("run_nowhere") as sub:
            assert not await bus.confirmed(sub)
        # A publish that finds no node is counted and logged, never raised into the run loop.
        await bus.publish("run_nowhere", [b"\x08\x01"])
        await bus.publish_many([("run_a", [b"\x08\x01"]), ("run_b", [b"\x08\x01"])])
        assert bus.publish_failures == 2
        assert not await bus.ping()
    finally:
        await bus.close()


async def test_a_plain_url_keeps_the_plain_bus(redis_url: str) -> None:
    assert not isinstance(event_bus(redis_url), ShardedEventBus)
    assert isinstance(redis_conn.connect("redis+cluster://127.0.0.1:9"), RedisCluster)
