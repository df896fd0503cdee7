"""Fault 6: pub/sub messages that are never published (TETHER_FAULT_DROP_PUBLISH_EVERY). A stream
notices the gap by sequence, or a lost *last* event by its quiet positioning check, and fills
from Postgres: every client still gets the exact list."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from tether_testkit.client import Client
from tether_testkit.history import History
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import free_port, start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
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
    metric,
    size,
    stored_events,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(120, 400))]

N_STREAM = size(4, 30)
N_RESTART = size(2, 10)


@pytest.mark.parametrize("every", [5, 1], ids=["drop-every-5th", "drop-all"])
async def test_lost_publish_is_refilled_from_postgres(
    every: int, private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    mport = free_port()
    env = {
        **private_env,
        **CHAOS_ENV,
        "TETHER_SCRIPTED_DELAY_S": "0.02",
        "TETHER_FAULT_DROP_PUBLISH_EVERY": str(every),
        "TETHER_METRICS_ADDR": f"127.0.0.1:{mport}",
    }
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name=f"chaos-drop{every}"))
    gw = procs.add(
        await asyncio.to_thread(
            # the runtime's metrics port: a gateway given it would serve its own metrics there
            start_gateway,
            {k: v for k, v in env.items() if k != "TETHER_METRICS_ADDR"},
            rt.addr,
            name=f"chaos-drop{every}-gw",
        )
    )
    db = await asyncpg.connect(env["DATABASE_URL"])
    grpc_client = Client(rt.addr, bearer())
    try:
        async with http_session() as http:
            texts = [f"stream {size(150, 300)} deltas"] * N_STREAM
            for _ in range(N_RESTART):
                service, _ = await abnormal_service(db, prefix="chaosd")
                texts.append(f"restart the abnormal {service} instance")
            run_ids = [await http_new_run(http, gw.addr, t) for t in texts]
            began = time.monotonic()
            decider, grpc_reader = History("decider"), History("grpc")
            readers = {r: History(f"sse{i}") for i, r in enumerate(run_ids)}
            sse = [
                follow_sse(
                    http,
                    lambda _: gw.addr,
                    r,
                    deadline_s=size(90, 300),
                    on_event=approver(http, lambda: gw.addr, r, record=decider),
                    record=readers[r],
                )
                for r in run_ids
            ]
            live = [grpc_client.events(r, 0, timeout=size(90, 300)) for r in run_ids]
            got = await asyncio.gather(*sse, *live)
            elapsed = time.monotonic() - began
            fills = await metric(
                http, f"http://127.0.0.1:{mport}/metrics", "tether_stream_gap_fills_total"
            )
        sse_res, grpc_res = got[: len(run_ids)], got[len(run_ids) :]
        dropped = sum("fault injection: publish dropped" in line for line in rt.log().splitlines())
        events = lost = dup = 0
        problems = []
        delays: list[float] = []
        for run_id, s, g in zip(run_ids, sse_res, grpc_res, strict=True):
            stored = await stored_events(db, run_id)
            truth = [e.sequence for e in stored]
            grpc_reader.replay(run_id, g)
            for ids in (s.ids, [e.sequence for e in g]):
                l_, d_ = compare(ids, truth)
                lost, dup = lost + l_, dup + d_
            events += len(s.frames) + len(g)
            delays += s.delays
            if s.frames != expected_frames(stored):
                problems.append(f"{run_id}: SSE list differs from Postgres")
            if [e.SerializeToString() for e in g] != [e.SerializeToString() for e in stored]:
                problems.append(f"{run_id}: gRPC list differs from Postgres")
            if not s.finished:
                problems.append(f"{run_id}: SSE client never saw the end")
        report = await check_histories(db, [decider, grpc_reader, *readers.values()], run_ids)
    finally:
        await grpc_client.close()
        await db.close()
    print(
        f"\n[fault 6: lost publish, every {every}] {len(run_ids)} runs, {dropped} publishes "
        f"dropped, {fills:.0f} gap fills from Postgres, {events} events checked (SSE + gRPC), "
        f"lost {lost}, duplicated {dup}; all done in {elapsed:.1f}s; SSE delivery delay "
        f"{fmt_s(delays)}"
    )
    chaos_table(
        f"6 lost publish (drop {'all' if every == 1 else f'every {every}th'}, {dropped} dropped)",
        runs=len(run_ids),
        events=events,
        lost=lost,
        duplicated=dup,
        recovery=f"delay {fmt_s(delays)}",
        report=report,
    )
    assert report.ok, report.explain()
    assert dropped > 0 and fills > 0
    assert not problems, "\n".join(problems[:20])


async def test_a_silent_runtime_stream_is_reopened_by_the_gateway(
    private_env: dict[str, str], procs: Procs
) -> None:
    """Every publish dropped and the runtime's positioning check off (an hour): a runtime stream
    hears nothing after its replay, as one that stalls for a reason nobody found (issue #33: twice
    in the network-fault suite). The gateway reopens a stream silent for
    TETHER_FEED_QUIET_REOPEN_S (1 s here) from its last sequence: every browser gets the exact
    log. Without it, each stream stopped after its first events, for good."""
    env = {
        **private_env,
        **CHAOS_ENV,
        "TETHER_SCRIPTED_DELAY_S": "0.05",
        "TETHER_FAULT_DROP_PUBLISH_EVERY": "1",
        "TETHER_STREAM_QUIET_CHECK_S": "3600",
        "TETHER_FEED_QUIET_REOPEN_S": "1",
    }
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-silent-rt"))
    gw = procs.add(await asyncio.to_thread(start_gateway, env, rt.addr, name="chaos-silent-gw"))
    db = await asyncpg.connect(env["DATABASE_URL"])
    try:
        async with http_session() as http:
            run_ids = [await http_new_run(http, gw.addr, "stream 40 deltas") for _ in range(3)]
            results = await asyncio.gather(
                *(follow_sse(http, lambda _: gw.addr, r, deadline_s=60) for r in run_ids)
            )
        for run_id, got in zip(run_ids, results, strict=True):
            assert got.finished, f"{run_id}: the browser never saw the end"
            assert got.frames == expected_frames(await stored_events(db, run_id)), run_id
    finally:
        await db.close()
    assert "run stream silent" in gw.log()
