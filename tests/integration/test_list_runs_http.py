"""`GET /v1/runs` filters through a real gateway and runtime (issue 18): agent, creation time
(`since` / `until`, RFC 3339), `userId` (403 without the grant `runs.read` on `*`), and page
tokens that only page the filters they were issued for (400 otherwise)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.security import bearer, new_user

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def _runs(
    http: aiohttp.ClientSession, gw: str, who: str, **query: str
) -> tuple[int, dict[str, Any]]:
    async with http.get(f"{gw}/v1/runs", params=query, headers=bearer(who)) as r:
        return r.status, await r.json()


async def _finished_run(http: aiohttp.ClientSession, gw: str, user: str, conv: str) -> str:
    async with http.post(
        f"{gw}/v1/conversations/{conv}/runs", json={"text": "stream 2 deltas"}, headers=bearer(user)
    ) as r:
        assert r.status == 201, await r.text()
        run_id: str = (await r.json())["run"]["id"]
    deadline = time.monotonic() + 30
    while True:
        async with http.get(f"{gw}/v1/runs/{run_id}", headers=bearer(user)) as r:
            if (await r.json())["run"]["status"] == "completed":
                return run_id
        assert time.monotonic() < deadline, f"{run_id} never completed"
        await asyncio.sleep(0.05)


async def test_runs_filtered_paged_and_guarded_over_http(
    base_env: dict[str, str], runtime: Proc, procs: list[Proc], db: Any
) -> None:
    gw = start_gateway(base_env, runtime.addr, name="list-runs-gw")
    procs.append(gw)
    user, admin = new_user("runs"), new_user("runs-admin")
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{gw.addr}/v1/conversations", json={"title": "t"}, headers=bearer(user)
        ) as r:
            conv = (await r.json())["conversation"]["id"]
        old, new = [await _finished_run(http, gw.addr, user, conv) for _ in range(2)]
        await db.execute(
            "UPDATE run SET created_at = '2025-01-01T00:00:00Z', agent = 'ledger' WHERE id = $1",
            old,
        )

        status, page = await _runs(http, gw.addr, user, agent="opspilot")
        assert status == 200, page
        assert [r["id"] for r in page["runs"]] == [new]
        status, page = await _runs(http, gw.addr, user, until="2025-06-01T00:00:00Z")
        assert [r["id"] for r in page["runs"]] == [old]
        status, page = await _runs(http, gw.addr, user, since="2025-06-01T00:00:00+00:00")
        assert [r["id"] for r in page["runs"]] == [new]

        status, first = await _runs(http, gw.addr, user, pageSize="1")
        assert status == 200 and [r["id"] for r in first["runs"]] == [new]
        token = first["nextPageToken"]
        status, rest = await _runs(http, gw.addr, user, pageSize="1", pageToken=token)
        assert status == 200 and [r["id"] for r in rest["runs"]] == [old]
        assert rest["nextPageToken"] is None
        status, body = await _runs(http, gw.addr, user, pageSize="1", pageToken=token, agent="x")
        assert status == 400 and body["error"]["code"] == "INVALID_ARGUMENT", body

        for bad in ({"since": "yesterday"}, {"until": "2025-01-01T00:00:00"}, {"agent": "a" * 201}):
            status, body = await _runs(http, gw.addr, user, **bad)
            assert status == 400, (bad, body)

        status, body = await _runs(http, gw.addr, admin, userId=user)
        assert status == 403, body
        await db.execute(
            'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
            admin,
            "runs.read",
            "*",
        )
        status, page = await _runs(http, gw.addr, admin, userId=user, conversationId=conv)
        assert status == 200, page
        assert [r["id"] for r in page["runs"]] == [new, old]
        status, page = await _runs(
            http,
            gw.addr,
            admin,
            userId="-",
            agent="ledger",
            until="2025-02-01T00:00:00Z",
            conversationId=conv,
        )
        assert [r["id"] for r in page["runs"]] == [old]
