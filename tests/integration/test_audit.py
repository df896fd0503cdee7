"""The audit log end to end (real runtime, gateway, Postgres): an approval and the write tool
execution it allowed are on record with who, what, where from and the keys; only an admin (the
grant `audit.read` on `*`) reads them through `GET /v1/audit`, in AIP-158 pages; `tether audit
export` writes the same records as JSON lines; and the table refuses UPDATE and DELETE."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_testkit.processes import Proc, start_gateway, tether_cli
from tether_testkit.security import bearer, new_user, owned_interrupted_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


async def until_status(db: Any, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 30
    while await db.fetchval("SELECT status FROM run WHERE id = $1", run_id) != status:
        assert time.monotonic() < deadline, f"{run_id} never {status}"
        await asyncio.sleep(0.05)


async def decide(
    http: aiohttp.ClientSession, gw: str, o: dict[str, str], user: str, decision: str, key: str
) -> None:
    body = {"interruptId": o["interrupt"], "decision": decision, "idempotencyKey": key}
    headers = {**bearer(user), "X-Forwarded-For": "203.0.113.7", "traceparent": TRACEPARENT}
    async with http.post(f"{gw}/v1/runs/{o['run']}/resume", json=body, headers=headers) as r:
        assert r.status == 202, await r.text()


async def audit_page(
    http: aiohttp.ClientSession, gw: str, who: str, **query: str
) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{gw}/v1/audit", params=query, headers=bearer(who)) as r:
        return r.status, await r.json()


async def test_approval_and_write_execution_are_audited_for_admins_only(
    base_env: dict[str, str], runtime: Proc, procs: list[Proc], db: Any
) -> None:
    # A gateway that trusts its callers' trace context (internal callers only, as behind another
    # service): the audit record then carries the caller's trace id. A browser-facing gateway
    # starts its own trace instead (test_sec_traceparent.py), and the record carries that one.
    trusting = {**base_env, "TETHER_TRUST_TRACEPARENT": "1"}
    gw = start_gateway(trusting, runtime.addr, name="audit-gw")
    procs.append(gw)
    user, admin = new_user("audit"), new_user("auditor")
    await db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
        admin,
        "audit.read",
        "*",
    )
    since = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    approve_key, reject_key = uuid.uuid4().hex, uuid.uuid4().hex
    async with aiohttp.ClientSession() as http:
        approved = await owned_interrupted_run(db, gw.addr, http, user)
        await decide(http, gw.addr, approved, user, "approve", approve_key)
        await until_status(db, approved["run"], "completed")
        rejected = await owned_interrupted_run(db, gw.addr, http, user)
        await decide(http, gw.addr, rejected, user, "reject", reject_key)
        await until_status(db, rejected["run"], "completed")

        status, page = await audit_page(http, gw.addr, admin, actor=user, since=since)
        assert status == 200, page
        records = page["auditRecords"]
        assert page["nextPageToken"] is None
        assert [(r["action"], r["runId"]) for r in records] == [
            ("interrupt.approved", approved["run"]),
            ("tool.claimed", approved["run"]),
            ("tool.executed", approved["run"]),
            ("interrupt.rejected", rejected["run"]),
        ]
        decision, claimed, executed, rejection = records
        call = await db.fetchrow(
            "SELECT call_id, idempotency_key FROM tool_call WHERE run_id = $1 AND tool = $2",
            approved["run"],
            "restart_instance",
        )
        assert decision["actor"] == user
        assert decision["interruptId"] == approved["interrupt"]
        assert decision["decision"] == "approved"
        assert decision["idempotencyKey"] == approve_key
        assert decision["permission"] == "instance.restart"
        assert decision["scope"].endswith("/prod")
        assert decision["tool"] == "restart_instance"
        # The address the gateway was told and the one it saw; the gRPC peer (the gateway).
        assert decision["clientAddress"] == "203.0.113.7, 127.0.0.1"
        assert decision["details"]["peer"].startswith("ipv4:127.0.0.1:")
        assert decision["pod"]
        assert decision["traceId"] == TRACE_ID  # the caller's trace, through the gateway
        for step, outcome in ((claimed, "claimed"), (executed, "ok")):
            assert step["outcome"] == outcome
            assert step["callId"] == call["call_id"]
            assert step["idempotencyKey"] == call["idempotency_key"]
            assert step["approver"] == user
            assert step["actor"] == user  # the requester
            assert step["interruptId"] == approved["interrupt"]
            assert step["tool"] == "restart_instance"
            assert step["scope"] == decision["scope"]
            # The continuation carries the approval's trace into the worker.
            assert step["traceId"] == TRACE_ID
        assert rejection["decision"] == "rejected"
        assert rejection["idempotencyKey"] == reject_key
        # The times are in order and inside the window asked for.
        times = [r["time"] for r in records]
        assert times == sorted(times) and times[0] >= since

        # Not an admin: refused, whoever's records are asked for; no caller: 401.
        status, body = await audit_page(http, gw.addr, user, actor=user)
        assert status == 403 and body["error"]["code"] == "PERMISSION_DENIED", body
        async with http.get(f"{gw.addr}/v1/audit") as r:
            assert r.status == 401

        # Pages of one (AIP-158): the same records, each once; a token is bound to its filters.
        seen: list[str] = []
        token = ""
        while True:
            query = {"actor": user, "since": since, "pageSize": "1"}
            if token:
                query["pageToken"] = token
            status, page = await audit_page(http, gw.addr, admin, **query)
            assert status == 200, page
            seen += [r["id"] for r in page["auditRecords"]]
            token = page["nextPageToken"] or ""
            if not token:
                break
            status, other = await audit_page(
                http, gw.addr, admin, actor=admin, since=since, pageToken=token
            )
            assert status == 400, other
        assert seen == [r["id"] for r in records]
        for bad in ({"since": "yesterday"}, {"pageSize": "0"}, {"pageToken": "garbage!"}):
            status, body = await audit_page(http, gw.addr, admin, **bad)
            assert status == 400, (bad, body)
        # A time range that ends before the records: nothing.
        status, page = await audit_page(http, gw.addr, admin, actor=user, until=since)
        assert status == 200 and page["auditRecords"] == []

    # The same records as JSON lines, for an auditor's archive.
    out = tether_cli("audit", "export", "--since", since, "--actor", user, env=base_env)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["id"] for r in lines] == [r["id"] for r in records]
    assert lines[0]["clientAddress"] == "203.0.113.7, 127.0.0.1"
    assert "exported 4 audit record(s)" in out.stderr

    # Append-only: the database itself refuses to rewrite history.
    for sql in (
        "UPDATE audit_record SET actor = 'someone-else' WHERE id = $1",
        "DELETE FROM audit_record WHERE id = $1",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
            await db.execute(sql, records[0]["id"])
    assert (
        await db.fetchval("SELECT actor FROM audit_record WHERE id = $1", records[0]["id"]) == user
    )
