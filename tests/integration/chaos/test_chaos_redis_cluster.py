"""Fault 9: the runtime and the gateway fan out through a Redis Cluster (three masters, one
replica each) while two masters are SIGKILLed one after the other and a third is switched over by
CLUSTER FAILOVER, runs streaming all along over SSE and gRPC. Every client gets every event
exactly once, in order; the time from each fault to the cluster being whole again is reported."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from tether_common.run_bus import channel
from tether_testkit.client import Client
from tether_testkit.history import History
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.redis_cluster import redis_cluster

from chaos.kit import (
    CHAOS_ENV,
    Procs,
    bearer,
    check_histories,
    compare,
    expected_frames,
    fmt_s,
    follow_sse,
    http_new_run,
    http_session,
    size,
    stored_events,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(150, 400))]

N_RUNS = size(8, 40)
DELTAS = size(400, 1500)  # at 20 ms each: 8 s (30 s at full size) of streaming per run


async def test_cluster_masters_killed_and_switched_over_mid_run(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:  # type: ignore[no-untyped-def]
    with redis_cluster() as cluster:
        env = {
            **private_env,
            **CHAOS_ENV,
            "REDIS_URL": cluster.url,
            "TETHER_SCRIPTED_DELAY_S": "0.02",
            "TETHER_COALESCE_MS": "0",  # one event per delta: the fault points count events
        }
        rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-cluster-rt"))
        gw = procs.add(await asyncio.to_thread(start_gateway, env, rt.addr, name="chaos-cl-gw"))
        db = await asyncpg.create_pool(env["DATABASE_URL"], min_size=1, max_size=4)
        client = Client(rt.addr, bearer())
        recovery: list[float] = []
        try:
            async with http_session() as http:
                # Runs on every master: each of the three faults then hits channels in use (8
                # random ids leave one master without any about one time in eight).
                run_ids: list[str] = []
                while len(run_ids) < N_RUNS or (
                    len({cluster.master_of(channel(r)).port for r in run_ids}) < 3
                    and len(run_ids) < 4 * N_RUNS
                ):
                    run_ids.append(await http_new_run(http, gw.addr, f"stream {DELTAS} deltas"))
                readers = [History(f"sse{i}") for i in range(len(run_ids))]
                grpc_reader = History("grpc")
                sse = [
                    asyncio.create_task(
                        follow_sse(http, lambda _: gw.addr, r, deadline_s=300, record=h)
                    )
                    for r, h in zip(run_ids, readers, strict=True)
                ]
                live = [asyncio.create_task(client.events(r, 0, timeout=300)) for r in run_ids]

                async def written(n: int) -> bool:
                    got = await db.fetchval(
                        "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids
                    )
                    return bool(got >= n * len(run_ids))

                async def fault(step: int, act: object) -> None:
                    await wait_for(f"runs streaming ({step})", lambda: written(step), 120)
                    t0 = time.monotonic()
                    act()  # type: ignore[operator]
                    await asyncio.to_thread(cluster.wait_ok, 60)
                    recovery.append(time.monotonic() - t0)

                def kill_busiest() -> None:
                    owners = [cluster.master_of(channel(r)) for r in run_ids]
                    victims = [o for o in owners if cluster.replica_of_or_none(o) is not None]
                    cluster.kill(max(victims, key=victims.count))

                def switch_over() -> None:
                    owners = [cluster.master_of(channel(r)) for r in run_ids]
                    master = next(o for o in owners if cluster.replica_of_or_none(o) is not None)
                    cluster.fail_over(cluster.replica_of(master))

                await fault(DELTAS // 5, kill_busiest)
                await fault(2 * DELTAS // 5, kill_busiest)
                await fault(3 * DELTAS // 5, switch_over)
                got = await asyncio.gather(*sse, *live)
            n_runs = len(run_ids)
            sse_res, grpc_res = got[:n_runs], got[n_runs:]
            events = lost = dup = 0
            problems: list[str] = []
            async with db.acquire() as conn:
                for run_id, s, g in zip(run_ids, sse_res, grpc_res, strict=True):
                    stored = await stored_events(conn, run_id)
                    truth = [e.sequence for e in stored]
                    grpc_reader.replay(run_id, g)
                    for ids in (s.ids, [e.sequence for e in g]):
                        l_, d_ = compare(ids, truth)
                        lost, dup = lost + l_, dup + d_
                    events += len(s.frames) + len(g)
                    if s.frames != expected_frames(stored):
                        problems.append(f"{run_id}: SSE list differs from Postgres")
                    if [e.SerializeToString() for e in g] != [
                        e.SerializeToString() for e in stored
                    ]:
                        problems.append(f"{run_id}: gRPC list differs from Postgres")
                    if not s.finished or stored[-1].WhichOneof("event") != "done":
                        problems.append(f"{run_id}: did not finish with done")
                report = await check_histories(conn, [grpc_reader, *readers], run_ids)
        finally:
            await client.close()
            await db.close()
    print(
        f"\n[fault 9: Redis Cluster, 2 masters killed + 1 switched over] {n_runs} runs; "
        f"{events} events checked (SSE + gRPC), lost {lost}, duplicated {dup}; cluster whole "
        f"again after {fmt_s(recovery)}"
    )
    chaos_table(
        "9 Redis Cluster failovers",
        runs=n_runs,
        events=events,
        lost=lost,
        duplicated=dup,
        double_exec=0,
        recovery=f"cluster ok {fmt_s(recovery)}",
        report=report,
    )
    assert report.ok, report.explain()
    assert "re-homing" in rt.log(), "the runtime never lost a shard: nothing was tested"
    assert not problems, "\n".join(problems[:20])
