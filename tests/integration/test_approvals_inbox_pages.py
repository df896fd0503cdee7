"""The approvals inbox is filtered by who may decide before a page is cut (issue #35, finding 5),
end to end: a runtime and a gateway on a database of their own, where one user's 205 cards on
payment-api (seeded straight into the store, older than anything else) would have filled the
old inbox's LIMIT 200 and left checkout-web/prod's only approver an empty inbox while her
decision on the hidden card was accepted. Now her card is on her first page and she decides it;
a broad approver pages through every card exactly once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.security import bearer, new_user
from tether_testkit.seeded_cards import seed_cards

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

APPROVE = "approve:instance.restart"  # OpsPilot's restart card names it as its approvers' grant
FOREIGN = 205  # more than the old LIMIT 200, and than a page


async def _grant(db: asyncpg.Connection, user: str, action: str, scope: str) -> None:
    await db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)', user, action, scope
    )


async def _page(
    http: aiohttp.ClientSession, gw: str, user: str, **query: str
) -> tuple[list[dict[str, Any]], str | None]:
    async with http.get(f"{gw}/v1/approvals", params=query, headers=bearer(user)) as r:
        assert r.status == 200, await r.text()
        body = await r.json()
    return body["approvals"], body.get("nextPageToken")


async def _checkout_card(
    http: aiohttp.ClientSession, gw: str, db: asyncpg.Connection, junior: str
) -> tuple[str, str]:
    """`junior` asks OpsPilot to restart checkout-web's abnormal prod instance; (run, interrupt)
    once the run waits at its card (scope checkout-web/prod)."""
    await db.execute("UPDATE inv_instance SET status = 'abnormal' WHERE id = 'checkout-web-1'")
    await _grant(db, junior, "instance.restart", "checkout-web/prod")
    h = bearer(junior)
    async with http.post(f"{gw}/v1/conversations", json={"title": "t"}, headers=h) as r:
        conv = (await r.json())["conversation"]["id"]
    body = {"text": "restart the abnormal checkout-web instance"}
    async with http.post(f"{gw}/v1/conversations/{conv}/runs", json=body, headers=h) as r:
        assert r.status == 201, await r.text()
        run = (await r.json())["run"]["id"]
    for _ in range(400):
        row = await db.fetchrow(
            "SELECT id, scope FROM interrupt WHERE run_id = $1 AND status = 'pending'", run
        )
        if row is not None:
            assert row["scope"] == "checkout-web/prod", row
            return run, row["id"]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run} never asked for confirmation")


async def test_foreign_cards_cannot_empty_an_approvers_inbox_and_pages_walk_every_card(
    private_env: dict[str, str], private_db: asyncpg.Connection, procs: list[Proc]
) -> None:
    db = private_db
    rt = start_runtime(private_env, name="runtime-inbox-pages")
    procs.append(rt)
    gw = start_gateway(private_env, rt.addr, name="gateway-inbox-pages")
    procs.append(gw)
    spammer, junior = new_user("spammer"), new_user("junior")
    lead, oncall = new_user("lead"), new_user("oncall")
    await _grant(db, lead, APPROVE, "checkout-web/prod")  # checkout-web/prod's only approver
    await _grant(db, oncall, APPROVE, "*/*")  # every service's
    foreign = await seed_cards(
        private_env["DATABASE_URL"], spammer, ["payment-api/prod"] * FOREIGN, grant=APPROVE
    )

    async with aiohttp.ClientSession() as http:
        run, intr = await _checkout_card(http, gw.addr, db, junior)

        # The lead's first page is her one card, though 205 older cards wait for others.
        cards, token = await _page(http, gw.addr, lead)
        assert [c["interrupt"]["id"] for c in cards] == [intr], len(cards)
        assert token is None
        assert cards[0]["requester"] == junior and cards[0]["runId"] == run
        cards, token = await _page(http, gw.addr, lead, pageSize="1")
        assert [c["interrupt"]["id"] for c in cards] == [intr] and token is None

        # A broad approver pages through all 206, oldest first, each exactly once.
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            query = {"pageSize": "50", **({"pageToken": token} if token else {})}
            cards, next_token = await _page(http, gw.addr, oncall, **query)
            pages += 1
            assert len(cards) <= 50
            seen.extend(c["interrupt"]["id"] for c in cards)
            if next_token is None:
                break
            token = next_token
        assert seen == [*foreign, intr], f"{len(seen)} cards over {pages} pages"
        assert pages == 5
        # Without a page size: the first 200 (what the inbox held before it had pages).
        cards, token = await _page(http, gw.addr, oncall)
        assert [c["interrupt"]["id"] for c in cards] == foreign[:200] and token

        # A page token continues only the inbox it was issued for.
        async with http.get(
            f"{gw.addr}/v1/approvals", params={"pageToken": token}, headers=bearer(lead)
        ) as r:
            assert r.status == 400, await r.text()
            assert (await r.json())["error"]["code"] == "INVALID_ARGUMENT"

        # She decides her card, and it leaves her inbox.
        key = uuid.uuid4().hex
        async with http.post(
            f"{gw.addr}/v1/runs/{run}/resume",
            json={"interruptId": intr, "decision": "approve", "idempotencyKey": key},
            headers=bearer(lead),
        ) as r:
            assert r.status == 202, await r.text()
        assert await _page(http, gw.addr, lead) == ([], None)
        assert await db.fetchval("SELECT resolved_by FROM interrupt WHERE id = $1", intr) == lead
