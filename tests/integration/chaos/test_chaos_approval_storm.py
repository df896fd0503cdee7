"""Fault 5: an approval storm. Many concurrent resume requests per interrupt over two gateways and
two runtimes: double clicks (same key, same body), competing keys, a reject racing approvals, a key
reused with another body, and retries after a client-side timeout. Exactly one decision wins per
interrupt, it executes at most once, and a key always gets the same answer."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import defaultdict
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_testkit.history import History
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import start_gateway, start_runtime

from chaos.kit import (
    CHAOS_ENV,
    TERMINAL_STATUSES,
    Procs,
    check_histories,
    check_log,
    headers,
    http_new_run,
    http_session,
    run_statuses,
    size,
    stored_events,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(size(120, 300))]

N_INTERRUPTS = size(4, 20)


async def resume(
    http: aiohttp.ClientSession,
    base: str,
    run_id: str,
    interrupt_id: str,
    decision: str,
    key: str,
    timeout: float | None = None,
) -> tuple[int, dict[str, Any] | None]:
    body = {"interruptId": interrupt_id, "decision": decision, "idempotencyKey": key}
    kw: dict[str, Any] = {}
    if timeout is not None:
        kw["timeout"] = aiohttp.ClientTimeout(total=timeout)
    try:
        async with http.post(
            f"{base}/v1/runs/{run_id}/resume", json=body, headers=headers(), **kw
        ) as r:
            return r.status, await r.json()
    except TimeoutError:
        return 0, None  # the client gave up; the server may still have acted


async def test_approval_storm(private_env: dict[str, str], procs: Procs, chaos_table) -> None:
    env = {**private_env, **CHAOS_ENV, "TETHER_DEMO_TOOL_DELAY_S": "0.3"}
    rts = [
        procs.add(await asyncio.to_thread(start_runtime, env, name=f"chaos-storm-rt{i}"))
        for i in range(2)
    ]
    gws = [
        procs.add(await asyncio.to_thread(start_gateway, env, rt.addr, name=f"chaos-storm-gw{i}"))
        for i, rt in enumerate(rts)
    ]
    a, b = gws[0].addr, gws[1].addr
    db = await asyncpg.create_pool(env["DATABASE_URL"], min_size=1, max_size=4)
    try:
        async with http_session() as http:
            runs: dict[str, str] = {}  # run -> instance
            for _ in range(N_INTERRUPTS):
                service, inst = await abnormal_service(db, prefix="chaoss")
                run_id = await http_new_run(http, a, f"restart the abnormal {service} instance")
                runs[run_id] = inst

            async def all_pending() -> bool:
                n = await db.fetchval(
                    "SELECT count(*) FROM interrupt WHERE status = 'pending' AND "
                    "run_id = ANY($1::text[])",
                    list(runs),
                )
                return bool(n == len(runs))

            await wait_for("every run waiting for approval", all_pending, 60)
            intr = {
                r["run_id"]: r["id"]
                for r in await db.fetch(
                    "SELECT id, run_id FROM interrupt WHERE run_id = ANY($1::text[])", list(runs)
                )
            }
            # Ten requests per interrupt, all at once, over both gateways.
            plan: list[tuple[str, str, str, str, float | None]] = []  # run, base, decision, key, t
            keys: dict[str, dict[str, str]] = {}
            for run_id in runs:
                k = {
                    n: f"{n}-{uuid.uuid4().hex[:12]}" for n in ("click", "other", "reject", "slow")
                }
                keys[run_id] = k
                plan += [
                    (run_id, a, "approve", k["click"], None),  # a double click ...
                    (run_id, a, "approve", k["click"], None),
                    (run_id, b, "approve", k["click"], None),  # ... and the same tab on B
                    (run_id, b, "reject", k["click"], None),  # the key reused, another body
                    (run_id, b, "approve", k["other"], None),  # another tab's approval
                    (run_id, a, "approve", k["other"], None),
                    (run_id, a, "reject", k["reject"], None),  # a colleague rejects
                    (run_id, b, "reject", k["reject"], None),
                    (run_id, a, "approve", k["slow"], 0.001),  # gives up at once ...
                    (run_id, b, "approve", uuid.uuid4().hex, None),
                ]
            random.shuffle(plan)
            first = await asyncio.gather(
                *(resume(http, base, r, intr[r], d, key, t) for r, base, d, key, t in plan)
            )
            # ... and retries with the same key once its timeout passed.
            retries = await asyncio.gather(
                *(resume(http, b, r, intr[r], "approve", keys[r]["slow"]) for r in runs)
            )
            answers = list(zip(plan, first, strict=True)) + [
                ((r, b, "approve", keys[r]["slow"], None), res)
                for r, res in zip(runs, retries, strict=True)
            ]

            async def all_done() -> bool:
                st = await run_statuses(db, list(runs))
                return all(s in TERMINAL_STATUSES for s in st.values())

            await wait_for("every run to finish", all_done, size(60, 180))
            problems: list[str] = []
            storm = History("storm")
            for (run_id, _, decision, key, _t), (status, _body) in answers:
                outcome = {202: "accepted", 409: "resolved"}.get(status, "error")
                storm.decision(run_id, intr[run_id], key, decision, outcome=outcome)
            statuses: dict[int, int] = defaultdict(int)
            by_key: dict[tuple[str, str], set[str]] = defaultdict(set)
            fresh_wins: dict[str, int] = defaultdict(int)
            for (run_id, _, _decision, key, _t), (status, body) in answers:
                statuses[status] += 1
                if status not in (0, 202, 409, 422):
                    problems.append(f"{run_id}: unexpected HTTP {status}: {body}")
                if status == 202 and body is not None:
                    by_key[(run_id, key)].add(json.dumps(body["run"], sort_keys=True))
                    if not body["replayed"]:
                        fresh_wins[run_id] += 1
            for (run_id, key), bodies in by_key.items():
                if len(bodies) != 1:
                    problems.append(f"{run_id}: key {key} got {len(bodies)} different bodies")
            # Replaying every winning key afterwards still gives the stored answer.
            rows = await db.fetch(
                "SELECT id, run_id, status, decision, idempotency_key FROM interrupt "
                "WHERE run_id = ANY($1::text[])",
                list(runs),
            )
            events = double = 0
            approved = rejected = 0
            for row in rows:
                run_id = row["run_id"]
                if row["status"] != "resolved":
                    problems.append(f"{run_id}: interrupt ended {row['status']}")
                    continue
                key, decision = row["idempotency_key"], row["decision"]
                verb = "approve" if decision == "approved" else "reject"
                status, body = await resume(http, a, run_id, row["id"], verb, key)
                if status != 202 or not body or not body["replayed"]:
                    problems.append(f"{run_id}: replay of the winning key got {status} {body}")
                elif (run_id, key) in by_key and json.dumps(
                    body["run"], sort_keys=True
                ) not in by_key[(run_id, key)]:
                    problems.append(f"{run_id}: the winning key's replay differs")
                if fresh_wins[run_id] > 1:
                    problems.append(f"{run_id}: {fresh_wins[run_id]} requests won")
                stored = await stored_events(db, run_id)
                events += len(stored)
                gaps, dups = check_log(stored)
                resolved = [e for e in stored if e.WhichOneof("event") == "interrupt_resolved"]
                if gaps or dups or len(resolved) != 1:
                    problems.append(
                        f"{run_id}: log gaps {gaps} dups {dups} resolved x{len(resolved)}"
                    )
                n = await executions(db, runs[run_id])
                storm.effect(run_id, runs[run_id], n)
                want = 1 if decision == "approved" else 0
                approved += decision == "approved"
                rejected += decision != "approved"
                if n > 1:
                    double += 1
                if n != want:
                    problems.append(f"{run_id}: decision {decision}, restarted {n} times")
            report = await check_histories(db, [storm], list(runs))
    finally:
        await db.close()
    total = len(answers)
    summary = ", ".join(f"{k or 'client timeout'}: {v}" for k, v in sorted(statuses.items()))
    print(
        f"\n[fault 5: approval storm] {total} resume requests on {len(runs)} interrupts over 2 "
        f"gateways / 2 runtimes ({summary}); {approved} approved, {rejected} rejected; "
        f"double executions {double}; {events} events checked"
    )
    chaos_table(
        f"5 approval storm, {total} resumes",
        runs=len(runs),
        events=events,
        double_exec=double,
        recovery="-",
        report=report,
    )
    assert report.ok, report.explain()
    assert not problems, "\n".join(problems[:20])
