"""Approvals for teams (issue 18), end to end with real runtime and gateway processes, Postgres
and Redis: a run one user asked for is approved by another person on another gateway pod (who
may decide it and nothing else); a policy that forbids self-approval refuses the requester; a
two-person policy runs the tool exactly once, after the second of two approvals racing from two
pods; the inbox stream survives a gateway restart without losing a card."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_testkit import stores
from tether_testkit.approvals_agent import AGENT_ENV, create_database
from tether_testkit.inventory import executions
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.security import bearer, new_user, owned_interrupted_run
from tether_testkit.sse import SseReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def resume(
    http: aiohttp.ClientSession, gw: str, run: str, intr: str, user: str, decision: str = "approve"
) -> tuple[int, dict[str, Any]]:
    body = {"interruptId": intr, "decision": decision, "idempotencyKey": uuid.uuid4().hex}
    async with http.post(f"{gw}/v1/runs/{run}/resume", json=body, headers=bearer(user)) as r:
        return r.status, await r.json()


async def inbox(http: aiohttp.ClientSession, gw: str, user: str) -> list[dict[str, Any]]:
    async with http.get(f"{gw}/v1/approvals", headers=bearer(user)) as r:
        assert r.status == 200, await r.text()
        items: list[dict[str, Any]] = (await r.json())["approvals"]
        return items


async def until_status(db: Any, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while await db.fetchval("SELECT status FROM run WHERE id = $1", run_id) != status:
        if time.monotonic() > deadline:
            evs = await db.fetch(
                "SELECT type, data::text FROM run_event WHERE run_id = $1 ORDER BY sequence",
                run_id,
            )
            raise AssertionError(f"{run_id} never {status}: {[tuple(e) for e in evs]}")
        await asyncio.sleep(0.05)


async def test_another_user_approves_on_another_pod_and_may_only_decide(
    base_env: dict[str, str], runtime: Proc, procs: list[Proc], db: Any
) -> None:
    """OpsPilot's restart names approve:instance.restart as its approvers' grant: a lead holding
    it on the service (as the demo's carol holds it on */*) decides a junior's restart from
    another gateway pod; she cannot read or cancel the run, and someone without the grant cannot
    even tell it exists. (The lead's grant is on this service alone: her inbox is this card, not
    every card the suite's other tests leave waiting.)"""
    gw1 = start_gateway(base_env, runtime.addr, name="approvals-gw1")
    gw2 = start_gateway(base_env, runtime.addr, name="approvals-gw2")
    procs.extend([gw1, gw2])
    junior, stranger, lead = new_user("junior"), new_user("stranger"), new_user("lead")
    async with aiohttp.ClientSession() as http:
        o = await owned_interrupted_run(db, gw1.addr, http, junior)
        service = o["instance"].rsplit("-", 1)[0]
        await db.execute(
            'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
            lead,
            "approve:instance.restart",
            f"{service}/*",
        )
        cards = [a for a in await inbox(http, gw2.addr, lead) if a["runId"] == o["run"]]
        assert len(cards) == 1, cards
        card = cards[0]
        assert card["requester"] == junior
        assert card["approvalGrant"] == "approve:instance.restart"
        assert card["interrupt"]["id"] == o["interrupt"]
        assert card["steps"][-1] == {"tool": "restart_instance", "status": "proposed"}
        assert card["steps"][0] == {"tool": "find_instances", "status": "succeeded"}
        assert not [a for a in await inbox(http, gw2.addr, stranger) if a["runId"] == o["run"]]

        # Only decide: the run itself stays someone else's.
        async with http.get(f"{gw2.addr}/v1/runs/{o['run']}", headers=bearer(lead)) as r:
            assert r.status == 404
        async with http.post(
            f"{gw2.addr}/v1/runs/{o['run']}/cancel", json={}, headers=bearer(lead)
        ) as r:
            assert r.status == 404
        status, body = await resume(http, gw2.addr, o["run"], o["interrupt"], stranger)
        assert status == 404 and body["error"]["code"] == "RUN_NOT_FOUND", body

        status, body = await resume(http, gw2.addr, o["run"], o["interrupt"], lead)
        assert status == 202, body
        await until_status(db, o["run"], "completed")
        assert await executions(db, o["instance"]) == 1
        # The loser of any later attempt gets the canonical answer.
        status, body = await resume(http, gw1.addr, o["run"], o["interrupt"], junior)
        assert status == 409, body
        row = await db.fetchrow(
            "SELECT actor, action FROM audit_record WHERE interrupt_id = $1 AND actor = $2",
            o["interrupt"],
            lead,
        )
        assert (row["actor"], row["action"]) == (lead, "interrupt.approved")
        assert (
            await db.fetchval("SELECT resolved_by FROM interrupt WHERE id = $1", o["interrupt"])
            == lead
        )


@pytest.fixture
async def foureyes_dsn(admin_dsn: str) -> AsyncIterator[str]:
    dsn = await create_database(admin_dsn, approvers=["carol", "dave"])
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
async def stack(
    base_env: dict[str, str], foureyes_dsn: str, procs: list[Proc]
) -> AsyncIterator[tuple[str, str, asyncpg.Connection]]:
    env = {**base_env, **AGENT_ENV, "DATABASE_URL": foureyes_dsn}
    rt = start_runtime(env, name="runtime-foureyes")
    gw1 = start_gateway(env, rt.addr, name="foureyes-gw1")
    gw2 = start_gateway(env, rt.addr, name="foureyes-gw2")
    procs.extend([rt, gw1, gw2])
    conn = await asyncpg.connect(foureyes_dsn)
    yield gw1.addr, gw2.addr, conn
    await conn.close()


async def paused(
    http: aiohttp.ClientSession, gw: str, db: asyncpg.Connection, text: str
) -> tuple[str, str]:
    """alice asks; returns (run, interrupt) once the run waits at its card."""
    h = bearer("alice")
    async with http.post(f"{gw}/v1/conversations", json={"title": "t"}, headers=h) as r:
        conv = (await r.json())["conversation"]["id"]
    async with http.post(
        f"{gw}/v1/conversations/{conv}/runs", json={"text": text, "agent": "foureyes"}, headers=h
    ) as r:
        assert r.status == 201, await r.text()
        run = (await r.json())["run"]["id"]
    await until_status(db, run, "interrupted")
    intr = await db.fetchval("SELECT id FROM interrupt WHERE run_id = $1", run)
    return run, intr


async def effects(db: asyncpg.Connection, run: str) -> int:
    return int(await db.fetchval("SELECT count(*) FROM ledger_call WHERE key LIKE $1", f"{run}:%"))


async def test_self_approval_is_refused_where_the_policy_says_so(stack) -> None:
    gw1, gw2, db = stack
    async with aiohttp.ClientSession() as http:
        run, intr = await paused(http, gw1, db, "send_peer to bob")
        status, body = await resume(http, gw1, run, intr, "alice")
        assert status == 403 and body["error"]["code"] == "SELF_APPROVAL_FORBIDDEN", body
        # Refused and on the record; nothing else changed.
        assert await db.fetchval("SELECT status FROM interrupt WHERE id = $1", intr) == "pending"
        assert (
            await db.fetchval(
                "SELECT outcome FROM audit_record WHERE interrupt_id = $1 AND actor = 'alice'", intr
            )
            == "denied"
        )
        assert not [a for a in await inbox(http, gw1, "alice") if a["runId"] == run]
        assert [a["runId"] for a in await inbox(http, gw2, "carol")] == [run]
        # The requester may still withdraw it; here a colleague approves instead.
        status, body = await resume(http, gw2, run, intr, "carol")
        assert status == 202, body
        await until_status(db, run, "completed")
        assert await effects(db, run) == 1


async def test_two_person_approval_runs_once_after_the_second_of_two_racing_approvals(
    stack,
) -> None:
    gw1, gw2, db = stack
    async with aiohttp.ClientSession() as http:
        # One approval is not enough: the card stays pending and nothing runs.
        run, intr = await paused(http, gw1, db, "send_two to bob")
        status, body = await resume(http, gw1, run, intr, "carol")
        assert status == 202 and body["run"]["status"] == "interrupted", body
        await asyncio.sleep(1.0)
        assert await effects(db, run) == 0
        assert await db.fetchval("SELECT status FROM interrupt WHERE id = $1", intr) == "pending"
        # carol counts once, whatever key she uses; the card left her inbox, not dave's.
        status, body = await resume(http, gw2, run, intr, "carol")
        assert status == 409 and body["error"]["code"] == "APPROVAL_ALREADY_GIVEN", body
        assert not [a for a in await inbox(http, gw1, "carol") if a["runId"] == run]
        [card] = [a for a in await inbox(http, gw2, "dave") if a["runId"] == run]
        assert card["approvedBy"] == ["carol"] and card["approvalsRequired"] == 2
        status, body = await resume(http, gw2, run, intr, "dave")
        assert status == 202, body
        await until_status(db, run, "completed")
        assert await effects(db, run) == 1

        # Both approvals at once, from two pods, several times: exactly one execution each
        # time, and only after the second approval was recorded.
        for _ in range(4):
            run, intr = await paused(http, gw1, db, "send_two to bob")
            answers = await asyncio.gather(
                resume(http, gw1, run, intr, "carol"), resume(http, gw2, run, intr, "dave")
            )
            assert [s for s, _ in answers] == [202, 202], answers
            await until_status(db, run, "completed")
            assert await effects(db, run) == 1
            last_approval = await db.fetchval(
                "SELECT max(approved_at) FROM interrupt_approval WHERE interrupt_id = $1", intr
            )
            first_call = await db.fetchval(
                "SELECT min(at) FROM ledger_call WHERE key LIKE $1", f"{run}:%"
            )
            assert first_call > last_approval
            actions = await db.fetch(
                "SELECT actor, action FROM audit_record WHERE interrupt_id = $1 "
                "AND action LIKE 'interrupt.%' ORDER BY id",
                intr,
            )
            assert sorted(r["actor"] for r in actions) == ["carol", "dave"]
            assert [r["action"] for r in actions] == [
                "interrupt.approval_recorded",
                "interrupt.approved",
            ]

        # Grants are read again at execution for every approver: carol's first approval no
        # longer counts once her grant is revoked, so dave's completes the card but nothing runs.
        run, intr = await paused(http, gw1, db, "send_two to bob")
        assert (await resume(http, gw1, run, intr, "carol"))[0] == 202
        await db.execute(
            'DELETE FROM "grant" WHERE user_id = $1 AND action = $2', "carol", "approve:ledger.send"
        )
        try:
            assert (await resume(http, gw2, run, intr, "dave"))[0] == 202
            await until_status(db, run, "completed")
            assert await effects(db, run) == 0
            assert (
                await db.fetchval(
                    "SELECT outcome FROM audit_record WHERE run_id = $1 AND action = 'tool.skipped'",
                    run,
                )
                == "denied"
            )
        finally:
            await db.execute(
                'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
                "carol",
                "approve:ledger.send",
                "*",
            )

        # Any approver's rejection rejects, even after the first approval.
        run, intr = await paused(http, gw1, db, "send_two to bob")
        assert (await resume(http, gw1, run, intr, "carol"))[0] == 202
        status, body = await resume(http, gw2, run, intr, "dave", "reject")
        assert status == 202, body
        await until_status(db, run, "completed")
        assert await effects(db, run) == 0


async def test_inbox_stream_loses_nothing_across_a_gateway_restart(
    base_env: dict[str, str], foureyes_dsn: str, procs: list[Proc]
) -> None:
    env = {**base_env, **AGENT_ENV, "DATABASE_URL": foureyes_dsn}
    rt = start_runtime(env, name="runtime-inbox")
    gw = start_gateway(env, rt.addr, name="inbox-gw")
    other = start_gateway(env, rt.addr, name="inbox-gw-other")
    procs.extend([rt, gw, other])
    port = int(gw.addr.rsplit(":", 1)[1])
    db = await asyncpg.connect(foureyes_dsn)
    try:
        async with aiohttp.ClientSession() as http:

            async def open_stream(last: str | None) -> tuple[aiohttp.ClientResponse, SseReader]:
                h = {**bearer("carol"), **({"Last-Event-ID": last} if last else {})}
                resp = await http.get(f"{gw.addr}/v1/approvals/events", headers=h)
                assert resp.status == 200
                return resp, SseReader(resp)

            async def until_cards(reader: SseReader, want: set[str]) -> Any:
                deadline = time.monotonic() + 20
                while True:
                    [frame] = await reader.events_until(
                        "approvals", timeout=deadline - time.monotonic()
                    )
                    if {a["runId"] for a in frame.json["approvals"]} == want:
                        return frame

            resp, reader = await open_stream(None)
            await until_cards(reader, set())
            first, i1 = await paused(http, other.addr, db, "send_peer to bob")
            seen = await until_cards(reader, {first})

            gw.kill()
            resp.close()
            # While carol's gateway is down, another card appears and the first is decided.
            second, _ = await paused(http, other.addr, db, "send_two to bob")
            assert (await resume(http, other.addr, first, i1, "dave"))[0] == 202
            gw = start_gateway(env, rt.addr, name="inbox-gw-2", port=port)
            procs.append(gw)
            resp, reader = await open_stream(seen.id)
            # The first frame is the whole inbox as it is now: nothing missed while away.
            [frame] = await reader.events_until("approvals", timeout=20)
            assert [a["runId"] for a in frame.json["approvals"]] == [second]
            assert frame.json["approvals"][0]["approvalsRequired"] == 2
            resp.close()
    finally:
        await db.close()
