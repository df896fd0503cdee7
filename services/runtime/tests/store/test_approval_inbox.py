"""The approvals inbox's query (store/approval_inbox.py): who may decide is filtered in SQL by the
grants' one scope rule, the table test_grants.py holds `grants.matches` to; and
ListPendingApprovals pages (a token continues only the inbox it was issued for). Cards are
seeded straight into the store under an approval grant of the test's own, so no other test's
approver ever sees them."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_runtime.api import run_listing
from tether_runtime.policy import approvals
from tether_runtime.store import grants
from tether_runtime.store.db import Pool, create_pool
from tether_testkit.client import Client, token
from tether_testkit.scope_cases import ODD_CASES, SCOPE_CASES
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.seeded_cards import seed_cards


def user(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def own_grant() -> str:
    return f"approve:t{uuid.uuid4().hex[:10]}.send"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[Pool]:
    p = await create_pool(database_url, min_size=1, max_size=1)
    yield p
    await p.close()


async def _inbox(pool: Pool, user_id: str) -> list[str]:
    async with pool.acquire() as conn:
        return [p.interrupt.id for p in await approvals.list_pending(conn, user_id, 1000)]


async def _grant(pool: Pool, user_id: str, action: str, scope: str) -> None:
    """Straight into the table: the odd patterns are ones grants.add refuses."""
    async with pool.acquire() as conn:
        await conn.execute(
            'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
            user_id,
            action,
            scope,
        )


async def test_the_inbox_query_filters_by_the_grants_scope_rule(pool, database_url) -> None:
    grant = own_grant()
    scopes = sorted({s for _, s, _ in SCOPE_CASES} | {s for _, s in ODD_CASES})
    requester = user("asker")
    cards = dict(
        zip(await seed_cards(database_url, requester, scopes, grant=grant), scopes, strict=True)
    )
    patterns = sorted({p for p, _, _ in SCOPE_CASES} | {p for p, _ in ODD_CASES})
    for pattern in patterns:
        approver = user("approver")
        await _grant(pool, approver, grant, pattern)
        await _grant(pool, approver, "approve:other.thing", "*")  # another action never counts
        want = [i for i, scope in cards.items() if grants.matches(pattern, scope)]
        assert await _inbox(pool, approver) == want, pattern
    # Nobody else sees them; the requester does (self-approval is allowed on these cards).
    assert await _inbox(pool, user("stranger")) == []
    assert await _inbox(pool, requester) == list(cards)


async def test_self_approval_and_an_approval_given_are_filtered_in_the_query(
    pool, database_url
) -> None:
    grant = own_grant()
    requester, approver = user("asker"), user("approver")
    (forbidden,) = await seed_cards(
        database_url, requester, ["svc/prod"], grant=grant, self_approval=False
    )
    allowed, approved = await seed_cards(database_url, requester, ["svc/prod"] * 2, grant=grant)
    await _grant(pool, approver, grant, "svc/*")
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO interrupt_approval (interrupt_id, approver, idempotency_key) "
            "VALUES ($1, $2, 'k')",
            approved,
            approver,
        )
    # The requester: not the card that forbids self-approval (she may withdraw it, not approve).
    assert await _inbox(pool, requester) == [allowed, approved]
    # The approver: not the card she already approved.
    assert await _inbox(pool, approver) == [forbidden, allowed]


@pytest.fixture
async def approver(runtime) -> AsyncIterator[tuple[str, Client]]:
    who = user("pager")
    c = Client(runtime.addr, token(TEST_SECRET, who))
    yield who, c
    await c.close()


async def _page(c: Client, **fields: object) -> pb.ListPendingApprovalsResponse:
    req = pb.ListPendingApprovalsRequest(**fields)
    return await c.stub.ListPendingApprovals(req, metadata=c.md, timeout=10)


@pytest.mark.process  # starts a process: not in test-fast
async def test_list_pending_approvals_pages(approver, runtime, database_url, pool) -> None:
    approver_id, approver = approver
    grant = own_grant()
    cards = await seed_cards(
        database_url, user("asker"), [f"svc-{n}/prod" for n in range(5)], grant=grant
    )
    await _grant(pool, approver_id, grant, "*/prod")
    seen, page_token, pages = [], "", 0
    while True:
        resp = await _page(approver, page_size=2, page_token=page_token)
        seen += [p.interrupt.id for p in resp.pending_approvals]
        pages += 1
        if not resp.next_page_token:
            break
        page_token = resp.next_page_token
    assert (seen, pages) == (cards, 3)
    everything = await _page(approver)  # no page size: up to 200, one page here
    assert [p.interrupt.id for p in everything.pending_approvals] == cards
    assert everything.next_page_token == ""

    first = await _page(approver, page_size=2)
    # A ListRuns token of the same caller is no inbox token either.
    runs_token = run_listing.encode_token(cards[1], run_listing.RunFilter(user_id=approver_id))
    other = Client(runtime.addr, token(TEST_SECRET, user("other")))
    try:
        for caller, bad in (
            (other, first.next_page_token),  # another caller's inbox token
            (approver, "not-a-token"),
            (approver, runs_token),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _page(caller, page_token=bad)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await other.close()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _page(approver, page_size=-1)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
