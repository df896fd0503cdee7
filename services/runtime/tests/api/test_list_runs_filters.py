"""ListRuns filters (issue 18): agent, creation time and whose runs, with AIP-158 page tokens bound
to the filters they were issued for. Another user's runs, or every user's, take the grant
`runs.read` on `*`; a narrower grant, or none, is PERMISSION_DENIED."""

from __future__ import annotations

import base64
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, reason, token, types
from tether_testkit.secrets import TEST_SECRET

JAN, MAR, JUN = (datetime(2025, m, 1, tzinfo=UTC) for m in (1, 3, 6))


def _ts(when: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(when)
    return out


async def _list(c: Client, **fields: object) -> pb.ListRunsResponse:
    return await c.stub.ListRuns(pb.ListRunsRequest(**fields), metadata=c.md, timeout=10)


async def _refused(c: Client, **fields: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _list(c, **fields)
    return info.value


@pytest.fixture
async def clients(runtime):
    made: list[Client] = []

    def new(name: str) -> tuple[Client, str]:
        user = f"{name}-{uuid.uuid4().hex[:8]}"
        made.append(Client(runtime.addr, token(TEST_SECRET, user)))
        return made[-1], user

    yield new
    for c in made:
        await c.close()


@pytest.fixture
async def three_runs(clients, db: Any) -> tuple[Client, str, str, list[str]]:
    """A user's three completed runs, oldest first: created in January (agent `ledger`), in June
    and now (both `opspilot`)."""
    owner, owner_id = clients("owner")
    conv = await owner.conversation("runs to find")
    ids = []
    for n in (2, 3, 4):
        run = (await owner.start(conv, f"stream {n} deltas")).run
        assert types(await owner.events(run.id))[-1] == "done"
        ids.append(run.id)
    # Only the stored facts a filter reads are moved: the agent and the creation time.
    await db.execute("UPDATE run SET agent = 'ledger', created_at = $2 WHERE id = $1", ids[0], JAN)
    await db.execute("UPDATE run SET created_at = $2 WHERE id = $1", ids[1], JUN)
    return owner, owner_id, conv, ids


@pytest.mark.process  # starts a process: not in test-fast
async def test_agent_and_time_filters(three_runs) -> None:
    owner, _, _, (jan, jun, now) = three_runs
    assert [r.id for r in (await _list(owner, agent="ledger")).runs] == [jan]
    assert [r.id for r in (await _list(owner, agent="opspilot")).runs] == [now, jun]
    assert [r.id for r in (await _list(owner, agent="nobody")).runs] == []
    assert [r.id for r in (await _list(owner, start_time=_ts(MAR))).runs] == [now, jun]
    assert [r.id for r in (await _list(owner, end_time=_ts(MAR))).runs] == [jan]
    between = await _list(
        owner, start_time=_ts(MAR), end_time=_ts(datetime(2025, 7, 1, tzinfo=UTC))
    )
    assert [r.id for r in between.runs] == [jun]
    # start_time is inclusive, end_time exclusive.
    assert [r.id for r in (await _list(owner, start_time=_ts(JUN), end_time=_ts(JUN))).runs] == []
    assert [r.id for r in (await _list(owner, end_time=_ts(JUN))).runs] == [jan]
    err = await _refused(owner, start_time=_ts(JUN), end_time=_ts(MAR))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await _refused(owner, agent="a" * 201)).code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.process  # starts a process: not in test-fast
async def test_page_tokens_are_bound_to_their_filters(three_runs) -> None:
    owner, _, _, (jan, jun, now) = three_runs
    first = await _list(owner, agent="opspilot", page_size=1)
    assert [r.id for r in first.runs] == [now]
    second = await _list(owner, agent="opspilot", page_size=1, page_token=first.next_page_token)
    assert [r.id for r in second.runs] == [jun]
    assert second.next_page_token == ""
    # The same token with other filters, a forged one, or a bare run id (the old token shape)
    # would skip or repeat runs: refused, and nothing listed.
    for fields in (
        {"page_token": first.next_page_token},
        {"agent": "ledger", "page_token": first.next_page_token},
        {"agent": "opspilot", "start_time": _ts(MAR), "page_token": first.next_page_token},
        {"page_token": now},
        {
            "page_token": base64.urlsafe_b64encode(
                json.dumps({"id": now, "f": "0" * 16}).encode()
            ).decode()
        },
    ):
        err = await _refused(owner, page_size=1, **fields)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, fields
    assert (await _refused(owner, page_size=-1)).code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.process  # starts a process: not in test-fast
async def test_other_users_runs_take_runs_read_on_everything(three_runs, clients, db) -> None:
    _, owner_id, conv, (jan, jun, now) = three_runs
    viewer, viewer_id = clients("viewer")
    # Without a grant, and with one narrower than `*`: refused, whichever user is asked for.
    for grant_scope in (None, "payments/*"):
        if grant_scope:
            await db.execute(
                'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
                viewer_id,
                "runs.read",
                grant_scope,
            )
        for user_id in (owner_id, "-"):
            err = await _refused(viewer, user_id=user_id)
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (grant_scope, user_id)
    # Their own runs need no grant (and there are none).
    assert list((await _list(viewer)).runs) == []
    assert list((await _list(viewer, user_id=viewer_id)).runs) == []

    await db.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)',
        viewer_id,
        "runs.read",
        "*",
    )
    theirs = await _list(viewer, user_id=owner_id)
    assert [r.id for r in theirs.runs] == [now, jun, jan]
    assert {r.conversation_id for r in theirs.runs} == {conv}
    assert [r.id for r in (await _list(viewer, user_id=owner_id, agent="ledger")).runs] == [jan]
    by_conv = await _list(viewer, user_id=owner_id, conversation_id=conv, page_size=2)
    assert [r.id for r in by_conv.runs] == [now, jun]
    rest = await _list(
        viewer,
        user_id=owner_id,
        conversation_id=conv,
        page_size=2,
        page_token=by_conv.next_page_token,
    )
    assert [r.id for r in rest.runs] == [jan]
    # Every user's runs, narrowed to the owner's conversation (the database is shared).
    everyone = await _list(viewer, user_id="-", conversation_id=conv)
    assert [r.id for r in everyone.runs] == [now, jun, jan]
    # A conversation is read as the listed user's: the owner's is not the viewer's own.
    err = await _refused(viewer, conversation_id=conv)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert reason(err) == "CONVERSATION_NOT_FOUND"
    # A token issued for one user's runs does not page another's.
    err = await _refused(viewer, user_id="-", page_token=by_conv.next_page_token, page_size=2)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


# Every index that leads with the user: which one the planner takes for the user alone depends on
# the table's statistics (a worker's young database holds a handful of runs).
BY_USER = ("run_user_idx", "run_user_status_idx", "run_user_agent_idx")


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({"user_id": "u", "agent": "ledger"}, ("run_user_agent_idx",)),
        # On a young database's statistics the planner may walk the user's index and filter the
        # status (seen once in CI): an index that leads with the user, never a scan.
        ({"user_id": "u", "status": "completed"}, ("run_user_status_idx", "run_user_idx")),
        ({"user_id": "u"}, BY_USER),
        ({"user_id": "u", "conversation_id": "conv_x"}, (*BY_USER, "run_conversation_idx")),
        ({"user_id": None, "since": JAN, "until": MAR}, ("run_created_idx",)),
    ],
)
async def test_each_filter_walks_an_index(
    db: Any, filters: dict[str, Any], index: tuple[str, ...]
) -> None:
    """The plan Postgres picks with sequential scans priced out: an index for every filter (the
    shared test database is small, so by cost alone a scan could win), walked directly or, on a
    small table, through a bitmap."""
    from tether_runtime.store import runs

    user_id = filters.pop("user_id")
    sql, args = runs.listing_query(user_id, 51, None, **filters)
    async with db.transaction():
        await db.execute("SET LOCAL enable_seqscan = off")
        plan = "\n".join(r[0] for r in await db.fetch(f"EXPLAIN {sql}", *args))
    used = re.findall(
        r"(?:Index Scan using|Index Only Scan using|Bitmap Index Scan on) (\w+)", plan
    )
    assert "Seq Scan" not in plan and used and set(used) <= set(index), plan
