"""Fault 2: a gateway SIGKILLed with many SSE clients attached. Every client reconnects to the
other gateway with its Last-Event-ID and ends with exactly the run's event list."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest
from tether_testkit.history import History
from tether_testkit.processes import start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    Procs,
    SseResult,
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

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(120, 400))]

N_RUNS = size(8, 55)
CLIENTS_PER_RUN = size(3, 4)
STREAM_N = size(120, 200)


async def test_gateway_sigkilled_with_sse_clients_attached(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    env = {**private_env, **CHAOS_ENV, "TETHER_SCRIPTED_DELAY_S": "0.05"}
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-gw-rt"))
    gw_env = {**env, "TETHER_SSE_HEARTBEAT_S": "2"}
    a = procs.add(await asyncio.to_thread(start_gateway, gw_env, rt.addr, name="chaos-gw-a"))
    b = procs.add(await asyncio.to_thread(start_gateway, gw_env, rt.addr, name="chaos-gw-b"))
    db = await asyncpg.connect(env["DATABASE_URL"])
    try:
        async with http_session() as http:
            run_ids = [
                await http_new_run(http, b.addr, f"stream {STREAM_N} deltas") for _ in range(N_RUNS)
            ]
            results = [SseResult(r) for r in run_ids for _ in range(CLIENTS_PER_RUN)]
            histories = [History(f"client{i}") for i in range(len(results))]
            # Everyone starts on gateway A; any reconnect goes to B (A is dead by then).
            tasks = [
                asyncio.create_task(
                    follow_sse(
                        http,
                        lambda attempt: a.addr if attempt == 0 else b.addr,
                        res.run_id,
                        deadline_s=size(90, 300),
                        result=res,
                        record=h,
                    )
                )
                for res, h in zip(results, histories, strict=True)
            ]

            async def all_attached() -> bool:
                return all(len(r.frames) >= 2 for r in results)

            await wait_for("every client streaming from A", all_attached, size(40, 120))
            attached = len(results)
            before_kill = sum(r.finished for r in results)
            a.kill()
            t_kill = time.monotonic()
            await asyncio.gather(*tasks)
        recoveries = [
            r.first_after_reconnect[0] - t_kill for r in results if r.first_after_reconnect
        ]
        events = lost = dup = 0
        problems = []
        truth = {r: await stored_events(db, r) for r in run_ids}
        for res in results:
            stored = truth[res.run_id]
            l_, d_ = compare(res.ids, [e.sequence for e in stored])
            lost, dup = lost + l_, dup + d_
            events += len(res.frames)
            if res.frames != expected_frames(stored):
                problems.append(
                    f"{res.run_id}: client list differs from Postgres ({l_} lost, {d_} dup)"
                )
            if not res.finished:
                problems.append(f"{res.run_id}: client never saw the end ({res.error})")
        reconnected = sum(1 for r in results if r.reconnects)
        report = await check_histories(db, histories, run_ids)
    finally:
        await db.close()
    print(
        f"\n[fault 2: gateway SIGKILL] {attached} SSE clients on {N_RUNS} runs attached to A; "
        f"{before_kill} had finished before the kill; {reconnected} reconnected to B; "
        f"{events} events checked, lost {lost}, duplicated {dup}; "
        f"kill -> first event from B {fmt_s(recoveries)}"
    )
    chaos_table(
        f"2 gateway SIGKILL, {attached} SSE clients",
        runs=N_RUNS,
        events=events,
        lost=lost,
        duplicated=dup,
        recovery=f"reconnect {fmt_s(recoveries)}",
        report=report,
    )
    assert report.ok, report.explain()
    assert not problems, "\n".join(problems[:20])
    assert reconnected == attached - before_kill
