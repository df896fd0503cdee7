"""A runtime and a gateway whose REDIS_URL names a real Redis Cluster (three masters, one replica
each): runs fan out over sharded pub/sub and every SSE client gets every event exactly once, in
order; then a master is SIGKILLed mid-run, its replica is promoted, and still every client gets
every event exactly once, in order (the gap fill and the positioning check at work)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import asyncpg
import pytest
from chaos.kit import (
    CHAOS_ENV,
    SseResult,
    expected_frames,
    follow_sse,
    http_new_run,
    http_session,
    stored_events,
    wait_for,
)
from tether_common.run_bus import channel
from tether_testkit import stores
from tether_testkit.processes import Proc, free_port, start_gateway, start_runtime
from tether_testkit.redis_cluster import RedisClusterNodes, redis_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N_RUNS = 6
CLIENTS_PER_RUN = 2
DELTAS = 150  # at 20 ms each: a run streams for about 3 s, long enough to kill a master in


# One cluster, database and pair of processes for the module (starting them is most of its
# time); the failover test runs last, as it leaves the cluster with a master fewer.
@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterNodes]:
    with redis_cluster() as nodes:
        yield nodes


@pytest.fixture(scope="module")
def cluster_env(admin_dsn: str, base_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A database of its own: the shared runtime must not claim these runs on the plain Redis."""
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield {**base_env, "DATABASE_URL": dsn}
    asyncio.run(stores.drop_database(admin_dsn, dsn))


@pytest.fixture(scope="module")
def stack(
    cluster_env: dict[str, str], cluster: RedisClusterNodes
) -> Iterator[tuple[Proc, Proc, str]]:
    metrics = f"127.0.0.1:{free_port()}"
    env = {
        **cluster_env,
        **CHAOS_ENV,
        "REDIS_URL": cluster.url,
        "TETHER_SCRIPTED_DELAY_S": "0.02",
        "TETHER_METRICS_ADDR": metrics,
    }
    rt = start_runtime(env, name="runtime-cluster")
    gw = start_gateway({k: v for k, v in env.items() if k != "TETHER_METRICS_ADDR"}, rt.addr)
    try:
        yield rt, gw, f"http://{metrics}"
    finally:
        gw.terminate()
        rt.terminate()


async def _counter(http: aiohttp.ClientSession, url: str, name: str) -> float:
    async with http.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
    return 0.0


async def _stream_runs(
    http: aiohttp.ClientSession, base: str, during: object = None
) -> tuple[list[str], list[SseResult]]:
    run_ids = [await http_new_run(http, base, f"stream {DELTAS} deltas") for _ in range(N_RUNS)]
    clients = [
        asyncio.create_task(follow_sse(http, lambda _: base, r, deadline_s=90))
        for r in run_ids
        for _ in range(CLIENTS_PER_RUN)
    ]
    if during is not None:
        await during(run_ids)  # type: ignore[operator]
    return run_ids, list(await asyncio.gather(*clients))


async def _exactly_once_in_order(dsn: str, run_ids: list[str], got: list[SseResult]) -> None:
    db = await asyncpg.connect(dsn)
    try:
        for res in got:
            stored = await stored_events(db, res.run_id)
            assert res.finished, f"{res.run_id}: no terminal event ({res.error})"
            assert stored[-1].WhichOneof("event") == "done", res.run_id
            assert res.frames == expected_frames(stored), f"{res.run_id}: differs from Postgres"
    finally:
        await db.close()


async def test_runs_stream_through_the_cluster_exactly_once_in_order(
    cluster_env: dict[str, str], cluster: RedisClusterNodes, stack: tuple[Proc, Proc, str]
) -> None:
    rt, gw, metrics = stack
    seen_on_masters: set[str] = set()

    async def watch(run_ids: list[str]) -> None:
        # While they stream, each run's channel is a SHARD channel on the master of its slot.
        async def subscribed() -> bool:
            for run_id in run_ids:
                node = cluster.master_of(channel(run_id))
                names = node.client().execute_command("PUBSUB", "SHARDCHANNELS", channel(run_id))
                if names:
                    seen_on_masters.add(run_id)
            return len(seen_on_masters) == len(run_ids)

        await wait_for("every run's shard channel", subscribed, 30, interval=0.02)

    async with http_session() as http:
        run_ids, got = await _stream_runs(http, gw.addr, watch)
        # Delivered by pub/sub, not by the fallback: no stream had to fill a gap from Postgres.
        assert await _counter(http, metrics, "tether_stream_gap_fills_total") == 0
    await _exactly_once_in_order(cluster_env["DATABASE_URL"], run_ids, got)
    assert "publish failed" not in rt.log()


async def test_a_master_killed_mid_run_loses_no_client_any_event(
    cluster_env: dict[str, str], cluster: RedisClusterNodes, stack: tuple[Proc, Proc, str]
) -> None:
    rt, gw, _metrics = stack
    db = await asyncpg.connect(cluster_env["DATABASE_URL"])
    killed: list[int] = []

    async def kill_a_master(run_ids: list[str]) -> None:
        async def streaming() -> bool:
            n = await db.fetchval(
                "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids
            )
            return bool(n >= 20 * len(run_ids))

        await wait_for("runs streaming", streaming, 60, interval=0.02)
        # The master of the most of these runs' channels: its streams lose their subscription.
        owners = [cluster.master_of(channel(r)) for r in run_ids]
        victim = max(owners, key=owners.count)
        killed.append(victim.port)
        cluster.kill(victim)
        await asyncio.to_thread(cluster.wait_ok)  # its replica is promoted

    try:
        async with http_session() as http:
            run_ids, got = await _stream_runs(http, gw.addr, kill_a_master)
        await _exactly_once_in_order(cluster_env["DATABASE_URL"], run_ids, got)
    finally:
        await db.close()
    # The runtime notices the loss in its shard's reader ("…lost, re-homing") or, when a stream
    # (un)subscribes first, in that change ("sharded pubsub change failed").
    assert killed and "sharded pubsub" in rt.log(), "the runtime never lost a shard: nothing tested"
