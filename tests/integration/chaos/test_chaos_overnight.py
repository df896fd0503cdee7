"""Fault 8: the note left overnight. Interrupts whose expiry lies far in the past or far in the
future (set in the row; no fake clock), resumed for real: an expired one is refused (410 over HTTP,
INTERRUPT_EXPIRED over gRPC) and its run ends saying nothing was done; a far-future approval
executes with the arguments resolved when it was proposed, even though the world moved on."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime

import asyncpg
import grpc
import pytest
from tether.runtime.v1 import events_pb2
from tether_testkit.client import Client, reason
from tether_testkit.history import History
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    Procs,
    bearer,
    check_histories,
    check_log,
    expected_frames,
    follow_sse,
    headers,
    http_approve,
    http_new_run,
    http_session,
    size,
    stored_events,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(90, 240))]

PAST = "1971-01-01T00:00:00Z"
FUTURE_SQL = "now() + interval '200 years'"


async def _pending(db: asyncpg.Pool, run_id: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT id, payload, expires_at FROM interrupt WHERE run_id = $1 AND status = 'pending'",
        run_id,
    )


async def test_far_past_and_far_future_expiry(
    private_env: dict[str, str], procs: Procs, chaos_table
) -> None:
    env = {**private_env, **CHAOS_ENV}
    rt = procs.add(await asyncio.to_thread(start_runtime, env, name="chaos-night-rt"))
    gw = procs.add(await asyncio.to_thread(start_gateway, env, rt.addr, name="chaos-night-gw"))
    db = await asyncpg.create_pool(env["DATABASE_URL"], min_size=1, max_size=4)
    client = Client(rt.addr, bearer())
    problems: list[str] = []
    n_each = size(2, 6)
    try:
        async with http_session() as http:
            cases = []  # (run, instance, service, kind)
            for i in range(3 * n_each):
                service, inst = await abnormal_service(db, prefix="chaosn")
                run_id = await http_new_run(
                    http, gw.addr, f"restart the abnormal {service} instance"
                )
                cases.append((run_id, inst, service, ("past-http", "past-grpc", "future")[i % 3]))
            for run_id, *_ in cases:
                await wait_for(f"{run_id} waiting", lambda r=run_id: _pending(db, r), 60)
            intr = {c[0]: await _pending(db, c[0]) for c in cases}
            for run_id, _inst, service, kind in cases:
                if kind == "future":
                    await db.execute(
                        f"UPDATE interrupt SET expires_at = {FUTURE_SQL} WHERE id = $1",
                        intr[run_id]["id"],
                    )
                    # The world moves on while the note waits: the service gets a second abnormal
                    # instance. Re-resolving "the abnormal instance" now would pick another one.
                    await db.execute(
                        "INSERT INTO inv_instance (id, service, env, status) "
                        "VALUES ($1, $2, 'prod', 'abnormal')",
                        f"{service}-2",
                        service,
                    )
                else:
                    await db.execute(
                        "UPDATE interrupt SET expires_at = $2::timestamptz WHERE id = $1",
                        intr[run_id]["id"],
                        datetime.fromisoformat(PAST.replace("Z", "+00:00")),
                    )
            outcomes: dict[str, str] = {}
            decider = History("decider")
            for run_id, _inst, _service, kind in cases:
                iid = intr[run_id]["id"]
                if kind == "past-http":
                    body = {
                        "interruptId": iid,
                        "decision": "approve",
                        "idempotencyKey": uuid.uuid4().hex,
                    }
                    async with http.post(
                        f"{gw.addr}/v1/runs/{run_id}/resume", json=body, headers=headers()
                    ) as r:
                        code = (await r.json())["error"]["code"] if r.status != 202 else ""
                        outcomes[run_id] = f"{r.status} {code}"
                        if r.status != 410 or code != "INTERRUPT_EXPIRED":
                            problems.append(
                                f"{run_id}: past expiry over HTTP got {r.status} {code}"
                            )
                elif kind == "past-grpc":
                    try:
                        await client.resume(run_id, iid)
                        outcomes[run_id] = "accepted"
                        problems.append(f"{run_id}: past expiry accepted over gRPC")
                    except grpc.aio.AioRpcError as err:
                        outcomes[run_id] = f"{err.code().name} {reason(err)}"
                        if reason(err) != "INTERRUPT_EXPIRED":
                            problems.append(f"{run_id}: past expiry over gRPC: {outcomes[run_id]}")
                else:
                    status = await http_approve(http, gw.addr, run_id, iid)
                    decider.decision(
                        run_id, iid, "", outcome="accepted" if status == 202 else "error"
                    )
                    outcomes[run_id] = str(status)
                    if status != 202:
                        problems.append(f"{run_id}: far-future approval got {status}")
            readers = [History(f"reader{i}") for i in range(len(cases))]
            results = await asyncio.gather(
                *(
                    follow_sse(http, lambda _: gw.addr, c[0], deadline_s=size(60, 120), record=h)
                    for c, h in zip(cases, readers, strict=True)
                )
            )
        events = 0
        for (run_id, inst, service, kind), res in zip(cases, results, strict=True):
            stored = await stored_events(db, run_id)
            events += len(stored)
            gaps, dups = check_log(stored)
            if gaps or dups or res.frames != expected_frames(stored):
                problems.append(f"{run_id}: client list differs from the log")
            kinds = [e.WhichOneof("event") for e in stored]
            if kinds[-1] != "done":
                problems.append(f"{run_id}: ended with {kinds[-1]}")
            text = "".join(
                e.text_delta.delta for e in stored if e.WhichOneof("event") == "text_delta"
            )
            resolved = [
                e.interrupt_resolved
                for e in stored
                if e.WhichOneof("event") == "interrupt_resolved"
            ]
            payload = intr[run_id]["payload"]
            payload = json.loads(payload) if isinstance(payload, str) else payload
            n1 = await executions(db, inst)
            decider.effect(run_id, inst, n1)
            if kind.startswith("past"):
                if n1 != 0:
                    problems.append(f"{run_id}: expired interrupt still restarted {inst}")
                if "did nothing" not in text and "expired" not in text:
                    problems.append(f"{run_id}: the run did not say nothing was done: {text!r}")
                if len(resolved) != 1 or resolved[0].decision != events_pb2.DECISION_EXPIRED:
                    problems.append(f"{run_id}: interrupt_resolved {resolved}")
            else:
                n2 = await executions(db, f"{service}-2")
                started = [
                    e.tool_started for e in stored if e.WhichOneof("event") == "tool_started"
                ]
                restart = [s for s in started if s.tool == "restart_instance"]
                if n1 != 1 or n2 != 0:
                    problems.append(f"{run_id}: restarts {inst}={n1}, {service}-2={n2}")
                if payload.get("target") != f"instance {inst} ({service}/prod)":
                    problems.append(f"{run_id}: payload target {payload.get('target')}")
                if [s.args_summary for s in restart] != [f"instance_id={inst}"]:
                    problems.append(f"{run_id}: restart args {[s.args_summary for s in restart]}")
        report = await check_histories(db, [decider, *readers])
    finally:
        await client.close()
        await db.close()
    print(
        f"\n[fault 8: overnight note] {len(cases)} runs: expires_at {PAST} -> "
        f"{sorted({v for r, v in outcomes.items() if not v.startswith('202')})}, run ends 'did "
        f"nothing', 0 restarts; expires_at +200 years -> approved, restarted the instance named "
        f"in the interrupt (not the second abnormal one added meanwhile); {events} events checked"
    )
    chaos_table(
        "8 expiry far past / far future",
        runs=len(cases),
        events=events,
        recovery="-",
        report=report,
    )
    assert report.ok, report.explain()
    assert not problems, "\n".join(problems[:20])
