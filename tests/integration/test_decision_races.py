"""Decisions that race, across two gateway pods, never answer 5xx and always end one consistent way.

Topology (real processes, a database of the test's own): gateway A -> API runtime A, gateway B ->
API runtime B, and one worker runtime that executes every run. Each loop makes 50 tries (in
concurrent batches) on runs paused at OpsPilot's restart confirmation:

1. approve on A and cancel on B, released at the same instant;
2. approve fired around the interrupt's expiry (TTL of a few seconds on the worker);
3. approve while the approver's grant is revoked (through `store/grants`).

"Consistent" is checked from Postgres (the interrupt, the tool call, the run, the inventory's
restarts) and the run's event log (one `interrupt_resolved` whose decision is the interrupt's, a
terminal event matching the run's status), against what each HTTP request was answered:

- a cancelled card: the approve got 409 INTERRUPT_ALREADY_RESOLVED, the cancel 200, the run is
  cancelled, the call rejected, no `tool_started`, no restart;
- an approved card: the approve got 202; a cancel answered 200 found the run queued and ended it
  before any worker took it (call still `approved`, no restart); a cancel answered 202 was
  recorded on a running run, which then ends cancelled or completed; a cancel answered 409
  RUN_NOT_CANCELLABLE came after the run had completed (one restart); in every case the instance
  was restarted exactly once if the call succeeded (`tool_started` in the log) and never if not;
- an expired card: the approve got 410 INTERRUPT_EXPIRED, the call was rejected, no restart;
- a grant revoked during the click: the approve got 403 (the card stays pending) or 202; with
  the worker held (SIGSTOP) until the revoke committed, an approved call must be refused at
  execution (`failed`, "revoked") and the instance never restarted.

Every status seen is also one the served OpenAPI document lists for that operation."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether.runtime.v1 import events_pb2
from tether_runtime.store import grants
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.security import bearer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

TRIES = 50
BATCH = 25
TERMINAL = ("completed", "failed", "cancelled")
TTL_S = 3.0


@dataclass
class Pods:
    a: str  # gateway A's URL
    b: str  # gateway B's URL
    worker: Proc
    db: asyncpg.Pool
    http: aiohttp.ClientSession
    seen: dict[str, set[int]] = field(default_factory=lambda: {"resume": set(), "cancel": set()})


@pytest.fixture
async def race_env(base_env: dict[str, str], admin_dsn: str) -> AsyncIterator[dict[str, str]]:
    dsn = await stores.create_fresh_database(admin_dsn)
    yield {**base_env, "DATABASE_URL": dsn}
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
async def start_pods(race_env: dict[str, str]) -> AsyncIterator[Callable[..., Awaitable[Pods]]]:
    procs: list[Proc] = []
    closers: list[Callable[[], Awaitable[None]]] = []

    async def start(worker_env: dict[str, str] | None = None) -> Pods:
        api = {**race_env, "TETHER_RUNTIME_ROLE": "api"}
        rts = await asyncio.gather(
            asyncio.to_thread(start_runtime, api, name="race-rt-a"),
            asyncio.to_thread(start_runtime, api, name="race-rt-b"),
            asyncio.to_thread(
                start_runtime,
                {**race_env, **(worker_env or {}), "TETHER_RUNTIME_ROLE": "worker"},
                name="race-worker",
            ),
        )
        procs.extend(rts)
        gws = await asyncio.gather(
            asyncio.to_thread(start_gateway, race_env, rts[0].addr, name="race-gw-a"),
            asyncio.to_thread(start_gateway, race_env, rts[1].addr, name="race-gw-b"),
        )
        procs.extend(gws)
        db = await asyncpg.create_pool(race_env["DATABASE_URL"], min_size=2, max_size=8)
        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        closers.extend([http.close, db.close])
        return Pods(gws[0].addr, gws[1].addr, rts[2], db, http)

    yield start
    for close in closers:
        await close()
    for p in procs:
        if p.alive():
            os.kill(p.pid, signal.SIGCONT)
            p.kill()


# -- requests ------------------------------------------------------------------------------


async def post(
    pods: Pods, base: str, path: str, body: dict[str, Any], user: str
) -> tuple[int, dict[str, Any]]:
    async with pods.http.post(f"{base}{path}", json=body, headers=bearer(user)) as r:
        data = await r.json(content_type=None)
        return r.status, data if isinstance(data, dict) else {}


async def approve(pods: Pods, base: str, run_id: str, intr: str, user: str) -> tuple[int, str]:
    body = {"interruptId": intr, "decision": "approve", "idempotencyKey": uuid.uuid4().hex}
    status, data = await post(pods, base, f"/v1/runs/{run_id}/resume", body, user)
    pods.seen["resume"].add(status)
    return status, str(data.get("error", {}).get("code", ""))


async def cancel(pods: Pods, base: str, run_id: str, user: str) -> tuple[int, str]:
    status, data = await post(pods, base, f"/v1/runs/{run_id}/cancel", {"reason": "race"}, user)
    pods.seen["cancel"].add(status)
    return status, str(data.get("error", {}).get("code", ""))


@dataclass
class Try:
    user: str
    instance: str
    run_id: str = ""
    interrupt_id: str = ""
    expires_at: float = 0.0  # epoch seconds, the store's clock
    answers: dict[str, tuple[int, str]] = field(default_factory=dict)


async def paused_runs(pods: Pods, users: list[str]) -> list[Try]:
    """One run per user, each started on gateway A and paused at its restart confirmation."""
    tries: list[Try] = []
    for user in users:
        service, instance = await abnormal_service(pods.db, prefix="race")
        tries.append(Try(user, instance))

    async def start(t: Try) -> None:
        status, data = await post(pods, pods.a, "/v1/conversations", {"title": "race"}, t.user)
        assert status == 201, data
        conv = data["conversation"]["id"]
        service = t.instance.removesuffix("-1")
        body = {
            "text": f"restart the abnormal {service} instance",
            "idempotencyKey": uuid.uuid4().hex,
        }
        status, data = await post(pods, pods.a, f"/v1/conversations/{conv}/runs", body, t.user)
        assert status == 201, data
        t.run_id = data["run"]["id"]

    await asyncio.gather(*(start(t) for t in tries))
    ids = [t.run_id for t in tries]
    deadline = time.monotonic() + 60
    while True:
        rows = await pods.db.fetch(
            "SELECT id, run_id, extract(epoch FROM expires_at) AS exp FROM interrupt "
            "WHERE status = 'pending' AND run_id = ANY($1::text[])",
            ids,
        )
        if len(rows) == len(tries):
            break
        assert time.monotonic() < deadline, f"only {len(rows)}/{len(tries)} runs paused"
        await asyncio.sleep(0.1)
    by_run = {r["run_id"]: r for r in rows}
    for t in tries:
        t.interrupt_id = by_run[t.run_id]["id"]
        t.expires_at = float(by_run[t.run_id]["exp"])
    return tries


async def until_terminal(pods: Pods, tries: list[Try], timeout: float = 60) -> None:
    ids = [t.run_id for t in tries]
    deadline = time.monotonic() + timeout
    while True:
        n = await pods.db.fetchval(
            "SELECT count(*) FROM run WHERE id = ANY($1::text[]) AND status = ANY($2::text[])",
            ids,
            list(TERMINAL),
        )
        if n == len(ids):
            return
        assert time.monotonic() < deadline, f"only {n}/{len(ids)} runs ended"
        await asyncio.sleep(0.1)


# -- the truth -----------------------------------------------------------------------------


@dataclass
class Truth:
    run: str
    intr_status: str
    decision: str
    call: str
    call_summary: str
    restarts: int
    kinds: list[str]
    ran: bool  # the log has the restart call's tool_started
    resolved: list[str]  # decisions of the interrupt_resolved events


async def truth(pods: Pods, t: Try) -> Truth:
    db = pods.db
    run = await db.fetchval("SELECT status FROM run WHERE id = $1", t.run_id)
    intr = await db.fetchrow(
        "SELECT status, decision, call_id FROM interrupt WHERE id = $1", t.interrupt_id
    )
    call = await db.fetchrow(
        "SELECT tool_call.status, coalesce(result_summary, '') AS summary FROM tool_call "
        "JOIN interrupt ON interrupt.call_id = tool_call.call_id AND "
        "interrupt.run_id = tool_call.run_id WHERE interrupt.id = $1",
        t.interrupt_id,
    )
    rows = await db.fetch(
        "SELECT data FROM run_event WHERE run_id = $1 ORDER BY sequence", t.run_id
    )
    evs = [events_pb2.RunEvent.FromString(bytes(r["data"])) for r in rows]
    assert [e.sequence for e in evs] == list(range(1, len(evs) + 1)), f"{t.run_id}: log not dense"
    return Truth(
        run=run,
        intr_status=intr["status"],
        decision=intr["decision"] or "",
        call=call["status"],
        call_summary=call["summary"],
        restarts=await executions(db, t.instance),
        kinds=[str(e.WhichOneof("event")) for e in evs],
        ran=any(
            e.WhichOneof("event") == "tool_started" and e.tool_started.call_id == intr["call_id"]
            for e in evs
        ),
        resolved=[
            events_pb2.Decision.Name(e.interrupt_resolved.decision)
            .removeprefix("DECISION_")
            .lower()
            for e in evs
            if e.WhichOneof("event") == "interrupt_resolved"
        ],
    )


def common(t: Try, w: Truth) -> list[str]:
    """What holds whoever won: no 5xx, one decision logged and equal to the card's, a terminal
    event matching the run, at most one restart and exactly one iff the call ran."""
    bad = [f"{k} answered {s} {c}" for k, (s, c) in t.answers.items() if s >= 500]
    if w.resolved != [w.decision]:
        bad.append(f"card {w.intr_status}/{w.decision} but logged decisions {w.resolved}")
    end = {"completed": "done", "cancelled": "cancelled", "failed": "error"}.get(w.run)
    if not w.kinds or w.kinds[-1] != end:
        bad.append(f"run {w.run} but its log ends with {w.kinds[-1:]}")
    if w.restarts != (1 if w.ran else 0) or w.ran != (w.call == "succeeded"):
        bad.append(f"restarts {w.restarts}, tool_started {w.ran}, call {w.call}")
    return bad


def report(name: str, outcomes: Counter[str], problems: list[str]) -> None:
    print(f"\n[{name}] {sum(outcomes.values())} tries: {dict(sorted(outcomes.items()))}")
    assert not problems, "\n".join(problems[:20])


async def served_document_lists(pods: Pods) -> None:
    async with pods.http.get(f"{pods.a}/openapi.json") as r:
        doc = await r.json()
    ops = {
        "resume": doc["paths"]["/v1/runs/{id}/resume"]["post"]["responses"],
        "cancel": doc["paths"]["/v1/runs/{id}/cancel"]["post"]["responses"],
    }
    for op, statuses in pods.seen.items():
        missing = {s for s in statuses if str(s) not in ops[op]}
        assert not missing, f"{op} answered {missing}, which the OpenAPI document does not list"


# -- the loops -----------------------------------------------------------------------------


async def test_approve_and_cancel_on_two_gateways(start_pods) -> None:
    pods: Pods = await start_pods()
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    for _ in range(TRIES // BATCH):
        tries = await paused_runs(pods, ["alice"] * BATCH)
        go = asyncio.Event()

        async def race(t: Try, go: asyncio.Event) -> None:
            async def click() -> None:
                await go.wait()
                t.answers["approve"] = await approve(pods, pods.a, t.run_id, t.interrupt_id, t.user)

            async def stop() -> None:
                await go.wait()
                t.answers["cancel"] = await cancel(pods, pods.b, t.run_id, t.user)

            await asyncio.gather(click(), stop())

        racing = asyncio.gather(*(race(t, go) for t in tries))
        await asyncio.sleep(0.05)  # every request waits at the barrier
        go.set()
        await racing
        await until_terminal(pods, tries)
        for t in tries:
            w = await truth(pods, t)
            ap, ca = t.answers["approve"], t.answers["cancel"]
            bad = common(t, w)
            if w.intr_status == "cancelled":
                outcome = "cancel won"
                want = (ap, ca[0], w.run, w.call) == (
                    (409, "INTERRUPT_ALREADY_RESOLVED"),
                    200,
                    "cancelled",
                    "rejected",
                )
                if not want or w.restarts:
                    bad.append(f"cancelled card: approve {ap}, cancel {ca}, run {w.run}")
            elif (w.intr_status, w.decision) == ("resolved", "approved"):
                if ap[0] != 202:
                    bad.append(f"approved card but the approve got {ap}")
                if ca[0] == 200:
                    outcome = "approve won, cancel applied at once"
                    if (w.run, w.call, w.restarts) != ("cancelled", "approved", 0):
                        bad.append(f"cancel 200 after approval: run {w.run}, call {w.call}")
                elif ca == (409, "RUN_NOT_CANCELLABLE"):
                    # The approved run finished before the cancel reached the runtime.
                    outcome = "approve won, run ended before the cancel"
                    if (w.run, w.restarts) != ("completed", 1):
                        bad.append(f"cancel 409 but run {w.run}, restarts {w.restarts}")
                elif ca[0] == 202:
                    outcome = f"approve won, cancel recorded, run {w.run}"
                    if w.run not in ("cancelled", "completed"):
                        bad.append(f"cancel 202 after approval, run ended {w.run}")
                    if w.run == "completed" and w.restarts != 1:
                        bad.append(f"completed after approval with {w.restarts} restarts")
                else:
                    outcome = "?"
                    bad.append(f"cancel answered {ca}")
            else:
                outcome = "?"
                bad.append(f"card ended {w.intr_status}/{w.decision}")
            outcomes[outcome] += 1
            problems += [f"{t.run_id}: {b}" for b in bad]
    report("approve vs cancel", outcomes, problems)
    await served_document_lists(pods)


async def test_approve_racing_expiry(start_pods) -> None:
    pods: Pods = await start_pods({"TETHER_INTERRUPT_TTL_S": str(TTL_S)})
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    skew = float(await pods.db.fetchval("SELECT extract(epoch FROM now())")) - time.time()
    for _ in range(TRIES // BATCH):
        tries = await paused_runs(pods, ["alice"] * BATCH)

        async def race(t: Try, base: str) -> None:
            # Around the expiry by the store's clock: some just before, some just after.
            at = t.expires_at - skew + random.uniform(-0.3, 0.3)
            await asyncio.sleep(max(0.0, at - time.time()))
            t.answers["approve"] = await approve(pods, base, t.run_id, t.interrupt_id, t.user)

        await asyncio.gather(*(race(t, (pods.a, pods.b)[i % 2]) for i, t in enumerate(tries)))
        await until_terminal(pods, tries)
        for t in tries:
            w = await truth(pods, t)
            ap = t.answers["approve"]
            bad = common(t, w)
            if ap[0] == 202:
                outcome = "approved in time"
                if (w.intr_status, w.decision, w.run, w.restarts) != (
                    "resolved",
                    "approved",
                    "completed",
                    1,
                ):
                    bad.append(f"approve 202 but card {w.intr_status}, run {w.run}")
            elif ap == (410, "INTERRUPT_EXPIRED"):
                outcome = "expired first"
                if (w.intr_status, w.decision, w.call, w.restarts) != (
                    "expired",
                    "expired",
                    "rejected",
                    0,
                ):
                    bad.append(f"approve 410 but card {w.intr_status}, call {w.call}")
            else:
                outcome = "?"
                bad.append(f"approve answered {ap}")
            outcomes[outcome] += 1
            problems += [f"{t.run_id}: {b}" for b in bad]
    report("approve vs expiry", outcomes, problems)
    await served_document_lists(pods)


async def test_grant_revoked_while_approving(start_pods) -> None:
    pods: Pods = await start_pods()
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    for batch in range(TRIES // BATCH):
        # The first batch holds the worker until every revoke committed: an approval that won
        # must then be refused at execution. The second lets the worker race too.
        hold = batch == 0
        users = [f"race-{uuid.uuid4().hex[:10]}" for _ in range(BATCH)]
        async with pods.db.acquire() as conn:
            for u in users:
                await grants.add(conn, u, "instance.restart", "*")
        tries = await paused_runs(pods, users)
        go = asyncio.Event()

        async def race(t: Try, base: str, go: asyncio.Event) -> None:
            async def click() -> None:
                await go.wait()
                t.answers["approve"] = await approve(pods, base, t.run_id, t.interrupt_id, t.user)

            async def revoke() -> None:
                await go.wait()
                # A direct DELETE beats an HTTP request through a gateway and a runtime every
                # time: spread the revokes across the approvals' processing.
                await asyncio.sleep(random.uniform(0.0, 0.15))
                async with pods.db.acquire() as conn:
                    assert await grants.revoke(conn, t.user, "instance.restart", "*")

            await asyncio.gather(click(), revoke())

        if hold:
            pods.worker.popen.send_signal(signal.SIGSTOP)
        try:
            racing = asyncio.gather(
                *(race(t, (pods.a, pods.b)[i % 2], go) for i, t in enumerate(tries))
            )
            await asyncio.sleep(0.05)
            go.set()
            await racing
        finally:
            if hold:
                pods.worker.popen.send_signal(signal.SIGCONT)
        # A card whose approval was refused is still waiting: cancel it so every run ends.
        for t in tries:
            if t.answers["approve"][0] == 403:
                t.answers["cancel"] = await cancel(pods, pods.b, t.run_id, t.user)
        await until_terminal(pods, tries)
        for t in tries:
            w = await truth(pods, t)
            ap = t.answers["approve"]
            bad = common(t, w)
            if ap == (403, "PERMISSION_DENIED"):
                outcome = "refused at the click"
                if (w.intr_status, w.run, w.restarts) != ("cancelled", "cancelled", 0):
                    bad.append(f"approve 403 but card {w.intr_status}, run {w.run}")
            elif ap[0] == 202:
                if w.call == "failed" and "revoked" in w.call_summary and w.restarts == 0:
                    outcome = "approved, refused at execution"
                elif w.call == "succeeded" and not hold:
                    outcome = "approved, executed before the revoke"
                else:
                    outcome = "?"
                    bad.append(
                        f"approved (worker held: {hold}), call {w.call} "
                        f"{w.call_summary!r}, restarts {w.restarts}"
                    )
                if w.decision != "approved" or w.run != "completed":
                    bad.append(f"approve 202 but card {w.decision}, run {w.run}")
            else:
                outcome = "?"
                bad.append(f"approve answered {ap}")
            outcomes[outcome] += 1
            problems += [f"{t.run_id}: {b}" for b in bad]
    report("approve vs revoke", outcomes, problems)
    await served_document_lists(pods)
