"""Fault 4: Postgres (a private cluster of this test's own) restarted while runs stream and while
others wait for approval. Runs continue once the processes reconnect; nothing is lost or
duplicated; the approvals given after the restart execute exactly once."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import pytest
from tether_testkit import stores
from tether_testkit.history import History
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    Procs,
    SseResult,
    check_histories,
    check_log,
    compare,
    expected_frames,
    fmt_s,
    follow_sse,
    http_approve,
    http_new_run,
    http_session,
    size,
    stored_events,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(150, 360))]

N_STREAM = size(4, 20)
N_RESTART = size(2, 8)
STREAM_N = size(400, 1000)
RESTARTS = size(1, 3)
DOWN_S = size(2.0, 5.0)


async def test_postgres_restarted_mid_run(
    base_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    from tether_cli.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="chaos-pg-") as folder:
        pg = EmbeddedPostgres(folder)
        admin = await asyncio.to_thread(pg.start)
        try:
            dsn = await stores.create_fresh_database(admin)
            await _scenario({**base_env, "DATABASE_URL": dsn}, pg, procs, chaos_table)
        finally:
            for p in procs.started:
                p.kill()
            await asyncio.to_thread(pg.stop)


@dataclass
class Outage:
    """One restart, in wall-clock seconds (comparable with event times and SSE arrivals)."""

    down_at: float  # the server is fully stopped: nothing commits from here on
    up_at: float  # the first probe connection after the start succeeded


async def _accepting(dsn: str) -> float:
    """When the database accepts connections again: a fresh connection and a query succeed (what
    the runtime needs, not only the postmaster's `ready`). Probes every 10 ms."""
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=1)
            try:
                await conn.fetchval("SELECT 1")
            finally:
                await conn.close()
            return time.time()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            await asyncio.sleep(0.01)


async def _restart(pg, dsn: str, outages: list[Outage]) -> float:  # type: ignore[no-untyped-def]
    """Stop the cluster (fast shutdown: every session is ended), keep it down a while, and start
    it on the same port (clients reconnect to the same DSN)."""
    began = time.monotonic()
    await asyncio.to_thread(pg.stop)
    down_at = time.time()
    await asyncio.sleep(DOWN_S)
    probe = asyncio.create_task(_accepting(dsn))
    await asyncio.to_thread(pg._launch)
    up_at = await asyncio.wait_for(probe, 30)
    outages.append(Outage(down_at, up_at))
    return time.monotonic() - began


def _back_after(results: list[SseResult], outages: list[Outage]) -> list[float]:
    """Per stream and outage: from "the database accepts connections again" to the arrival at
    the client of the stream's first event written after the server went down. Streams whose run
    had ended before the outage (no such event) do not count."""
    backs: list[float] = []
    for res in results:
        written = [_written(data) for _, _, data in res.frames]
        for out in outages:
            for at, arrived in zip(written, res.arrived, strict=True):
                if at > out.down_at:
                    backs.append(arrived - out.up_at)
                    break
    return backs


def _written(data: str) -> float:
    stamp = json.loads(data)["time"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def _scenario(env0: dict[str, str], pg, procs: Procs, chaos_table) -> None:  # type: ignore[no-untyped-def]
    env = {**env0, **CHAOS_ENV, "TETHER_SCRIPTED_DELAY_S": "0.02"}
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-pg-rt"))
    gw = procs.add(await asyncio.to_thread(start_gateway, env, rt.addr, name="chaos-pg-gw"))
    dsn = env["DATABASE_URL"]
    db = await asyncpg.connect(dsn)
    texts = [f"stream {STREAM_N} deltas"] * N_STREAM
    targets: dict[str, str] = {}
    for _ in range(N_RESTART):
        service, inst = await abnormal_service(db, prefix="chaosp")
        texts.append(f"restart the abnormal {service} instance")
        targets[texts[-1]] = inst
    await db.close()
    downtimes: list[float] = []
    outages: list[Outage] = []
    async with http_session() as http:
        run_ids = [await http_new_run(http, gw.addr, t) for t in texts]
        restart_runs = {r: targets[t] for r, t in zip(run_ids, texts, strict=True) if t in targets}
        following = [SseResult(r) for r in run_ids]
        readers = [History(f"reader{i}") for i in range(len(following))]
        decider = History("decider")
        tasks = [
            asyncio.create_task(
                follow_sse(
                    http,
                    lambda _: gw.addr,
                    f.run_id,
                    deadline_s=size(120, 300),
                    result=f,
                    record=h,
                )
            )
            for f, h in zip(following, readers, strict=True)
        ]
        db = await asyncpg.connect(dsn)

        async def ready() -> bool:
            pending = await db.fetchval(
                "SELECT count(*) FROM interrupt WHERE status = 'pending' AND "
                "run_id = ANY($1::text[])",
                list(restart_runs),
            )
            deltas = await db.fetchval(
                "SELECT count(*) FROM run_event WHERE run_id = ANY($1::text[])", run_ids
            )
            # Every client's stream open too (it has had an event): a restart while a stream is
            # still being opened is answered 503 and retried, which is not what this test is about.
            opened = all(f.frames for f in following)
            return bool(pending == len(restart_runs) and deltas >= 10 * len(run_ids) and opened)

        await wait_for("runs streaming and waiting", ready, 60)
        interrupts = {
            r["run_id"]: r["id"]
            for r in await db.fetch(
                "SELECT id, run_id FROM interrupt WHERE status = 'pending' AND "
                "run_id = ANY($1::text[])",
                list(restart_runs),
            )
        }
        await db.close()
        for _ in range(RESTARTS):
            downtimes.append(await _restart(pg, dsn, outages))
            await asyncio.sleep(size(1.5, 3.0))
        # Approvals after the restart: the gateway and runtime must have reconnected.
        t_back = time.monotonic()
        approved_at: list[float] = []
        for run_id, iid in interrupts.items():
            for _ in range(40):
                status = await http_approve(http, gw.addr, run_id, iid, key=f"pg-{iid}")
                outcome = {202: "accepted", 409: "resolved"}.get(status, "error")
                decider.decision(run_id, iid, f"pg-{iid}", outcome=outcome)
                if status in (202, 409):
                    break
                await asyncio.sleep(0.5)
            assert status == 202, f"approval after the restart failed: HTTP {status}"
            approved_at.append(time.monotonic() - t_back)
        results = await asyncio.gather(*tasks)

    db = await asyncpg.connect(dsn)
    try:
        events = lost = dup = double = 0
        problems: list[str] = []
        ups = [o.up_at for o in outages]
        first_after = [float("inf")] * len(ups)  # first event written after each start
        for res in results:
            stored = await stored_events(db, res.run_id)
            for e in stored:
                at = e.time.ToNanoseconds() / 1e9
                for i, up in enumerate(ups):
                    if at >= up:
                        first_after[i] = min(first_after[i], at - up)
            gaps, dups = check_log(stored)
            l_, d_ = compare(res.ids, [e.sequence for e in stored])
            lost, dup = lost + l_ + gaps, dup + d_ + dups
            events += len(res.frames)
            if res.frames != expected_frames(stored):
                problems.append(f"{res.run_id}: client list differs from Postgres")
            if not stored or stored[-1].WhichOneof("event") != "done":
                problems.append(f"{res.run_id}: did not end with done")
        for run_id, inst in restart_runs.items():
            n = await executions(db, inst)
            decider.effect(run_id, inst, n)
            double += n > 1
            if n != 1:
                problems.append(f"{run_id}: approved after the restart, restarted {n} times")
        statuses = dict(
            await db.fetch("SELECT id, status FROM run WHERE id = ANY($1::text[])", run_ids)
        )
        report = await check_histories(db, [decider, *readers], run_ids)
    finally:
        await db.close()
    reconnects = sum(r.reconnects for r in results)
    resumed = [x for x in first_after if x != float("inf")]
    # The runs waiting for approval are idle by design until the approvals after the last restart.
    streaming = [r for r in results if r.run_id not in restart_runs]
    back = _back_after(streaming, outages)
    print(
        f"\n[fault 4: Postgres restarted x{RESTARTS}] {len(run_ids)} runs ({len(restart_runs)} "
        f"waiting for approval); down {DOWN_S:.0f}s each (stop -> ready {fmt_s(downtimes)}); "
        f"first event written after the start {fmt_s(resumed)}; next event at each stream after "
        f"the database accepts connections {fmt_s(back)} (n={len(back)}); "
        f"SSE reconnects {reconnects}; "
        f"approval after restart answered in {fmt_s(approved_at)}; {events} events checked, "
        f"lost {lost}, duplicated {dup}, double executions {double}; statuses "
        f"{sorted(set(statuses.values()))}"
    )
    chaos_table(
        f"4 Postgres restart x{RESTARTS}",
        runs=len(run_ids),
        events=events,
        lost=lost,
        duplicated=dup,
        double_exec=double,
        recovery=f"down {DOWN_S:.0f}s; next event per stream after DB up {fmt_s(back)}",
        report=report,
    )
    assert report.ok, report.explain()
    assert not problems, "\n".join(problems[:20])
    assert len(resumed) == len(ups), "no run wrote an event after a restart"
    # Every stream still running at an outage moved on after it (the figure above is its delay).
    assert back, "no stream received an event written after a restart"
    # The runtime's stream rides out a short outage: in the fast tier (2 s down) no SSE client
    # has to reconnect. A longer outage (full tier, 5 s x3) still breaks some streams where the
    # gateway reopens them (StreamRunEvents' open and GetRun answer INTERNAL while the store is
    # away); the clients then reconnect and still end exact, as checked above.
    if DOWN_S <= 2.0:
        assert reconnects == 0, f"{reconnects} SSE reconnects during the Postgres restart"
