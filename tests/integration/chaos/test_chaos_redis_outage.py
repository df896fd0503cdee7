"""Fault 3: Redis (a private server of this test's own) stopped mid-run for a while, then
started again. Runs go on (Postgres is the truth), clients lose and duplicate nothing, and the
delay the outage adds to delivery is measured."""

from __future__ import annotations

import asyncio
import tempfile
import time

import asyncpg
import pytest
from tether_testkit.client import Client
from tether_testkit.history import History
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    PrivateRedis,
    Procs,
    approver,
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

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(120, 300))]

OUTAGE_S = size(3.0, 10.0)
N_STREAM = size(4, 20)
N_RESTART = size(2, 6)
STREAM_N = size(400, 1200)


async def test_redis_stopped_mid_run(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    with tempfile.TemporaryDirectory(prefix="chaos-redis-") as folder:
        redis = PrivateRedis(folder)
        await asyncio.to_thread(redis.start)
        try:
            await _scenario(private_env, procs, chaos_table, redis)
        finally:
            redis.stop()


async def _scenario(env0: dict[str, str], procs: Procs, chaos_table, redis: PrivateRedis) -> None:  # type: ignore[no-untyped-def]
    env = {**env0, **CHAOS_ENV, "REDIS_URL": redis.url, "TETHER_SCRIPTED_DELAY_S": "0.02"}
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-redis-rt"))
    gw = procs.add(await asyncio.to_thread(start_gateway, env, rt.addr, name="chaos-redis-gw"))
    db = await asyncpg.create_pool(env["DATABASE_URL"], min_size=1, max_size=4)
    client = Client(rt.addr, bearer())
    outage = asyncio.Event()
    window: list[float] = []
    try:
        async with http_session() as http:
            texts = [f"stream {STREAM_N} deltas"] * N_STREAM
            targets = []
            for _ in range(N_RESTART):
                service, inst = await abnormal_service(db, prefix="chaosr")
                targets.append(inst)
                texts.append(f"restart the abnormal {service} instance")
            run_ids = [await http_new_run(http, gw.addr, t) for t in texts]
            decider, grpc_reader = History("decider"), History("grpc")
            readers = {r: History(f"sse{i}") for i, r in enumerate(run_ids)}
            approve = {r: approver(http, lambda: gw.addr, r, record=decider) for r in run_ids}

            async def on_event_for(run_id: str):  # type: ignore[no-untyped-def]
                async def on_event(kind: str, data: dict) -> None:  # type: ignore[type-arg]
                    if kind == "interrupt":
                        # Approve during the outage: the decision must not need Redis.
                        await asyncio.wait_for(outage.wait(), 60)
                        await approve[run_id](kind, data)

                return on_event

            sse = [
                asyncio.create_task(
                    follow_sse(
                        http,
                        lambda _: gw.addr,
                        r,
                        deadline_s=size(90, 240),
                        on_event=await on_event_for(r),
                        record=readers[r],
                    )
                )
                for r in run_ids
            ]
            live = [
                asyncio.create_task(client.events(r, 0, timeout=size(90, 240))) for r in run_ids
            ]

            async def streaming() -> bool:
                n = await db.fetchval(
                    "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids
                )
                return bool(n >= 10 * len(run_ids))

            await wait_for("runs streaming", streaming, 60)
            before = await db.fetchval(
                "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids
            )
            redis.stop()
            window.append(time.time())
            outage.set()
            await asyncio.sleep(OUTAGE_S)
            during = await db.fetchval(
                "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids
            )
            await asyncio.to_thread(redis.start)
            window.append(time.time())
            got = await asyncio.gather(*sse, *live)
        sse_res, grpc_res = got[: len(run_ids)], got[len(run_ids) :]
        events = lost = dup = 0
        problems: list[str] = []
        delays_out: list[float] = []
        delays_all: list[float] = []
        for run_id, s, g in zip(run_ids, sse_res, grpc_res, strict=True):
            stored = await stored_events(db, run_id)
            truth = [e.sequence for e in stored]
            grpc_reader.replay(run_id, g)
            for ids in (s.ids, [e.sequence for e in g]):
                l_, d_ = compare(ids, truth)
                lost, dup = lost + l_, dup + d_
            events += len(s.frames) + len(g)
            delays_all += s.delays
            if s.frames != expected_frames(stored):
                problems.append(f"{run_id}: SSE list differs from Postgres")
            if [e.SerializeToString() for e in g] != [e.SerializeToString() for e in stored]:
                problems.append(f"{run_id}: gRPC list differs from Postgres")
            if not s.finished or stored[-1].WhichOneof("event") != "done":
                problems.append(f"{run_id}: did not finish with done")
            delays_out += _outage_delays(s, stored, window)
        double = 0
        for run_id, inst in zip(run_ids[N_STREAM:], targets, strict=True):
            n = await executions(db, inst)
            decider.effect(run_id, inst, n)
            double += n > 1
            if n != 1:
                problems.append(f"{inst}: restarted {n} times (approved during the outage)")
        report = await check_histories(db, [decider, grpc_reader, *readers.values()], run_ids)
    finally:
        await client.close()
        await db.close()
    print(
        f"\n[fault 3: Redis down {OUTAGE_S:.0f}s] {len(run_ids)} runs; {during - before} events "
        f"written while Redis was down; {events} events checked (SSE + gRPC), lost {lost}, "
        f"duplicated {dup}, double executions {double}; delivery delay of events written during "
        f"the outage {fmt_s(delays_out)} (overall {fmt_s(delays_all)})"
    )
    chaos_table(
        f"3 Redis down {OUTAGE_S:.0f}s",
        runs=len(run_ids),
        events=events,
        lost=lost,
        duplicated=dup,
        double_exec=double,
        recovery=f"delay {fmt_s(delays_out)}",
        report=report,
    )
    assert report.ok, report.explain()
    assert during > before, "runs stopped while Redis was down"
    assert not problems, "\n".join(problems[:20])


def _outage_delays(res, stored, window):  # type: ignore[no-untyped-def]
    """SSE delays of events stored during the outage (the reader notes one delay per frame)."""
    out = []
    for (seq, _, _), delay in zip(res.frames, res.delays, strict=False):
        e = stored[seq - 1] if 0 < seq <= len(stored) else None
        if e is not None and window[0] <= e.time.ToNanoseconds() / 1e9 <= window[1]:
            out.append(delay)
    return out
