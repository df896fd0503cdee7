"""A read-only tool call's claim folded into the fenced append (event_log.ReadClaim, RunWriter's
ClaimRead): written with its tool_started in one statement when the lease and position hold, not
at all when they do not (invariant: a zombie claims nothing), and through the shared statement
of the EventSink rather than a transaction of its own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from tether_common.run_bus import EventBus
from tether_runtime.domain import events as ev
from tether_runtime.store import event_log, grants
from tether_runtime.store.statement_count import COUNTS
from tether_runtime.streams.event_sink import EventSink
from tether_runtime.streams.run_writer import ClaimRead, ReadGrant, RunWriter
from tether_testkit.running_runs import running_run
from tether_testkit.shared_appends import count_shared_appends


async def _running(conn: Any) -> tuple[str, int]:
    run = await running_run(conn, "claims")
    return run.id, run.lease_epoch


async def _call(conn: Any, run_id: str) -> Any:
    return await conn.fetchrow(
        "SELECT status, claimed_epoch, args, idempotency_key FROM tool_call WHERE run_id = $1",
        run_id,
    )


async def test_the_claim_is_written_with_the_append_only_if_the_fence_holds(pool: Any) -> None:
    async with pool.acquire() as conn:
        run_id, epoch = await _running(conn)
        claim = event_log.ReadClaim("c1", "recent_errors", '{"service": "x"}', f"{run_id}:c1")
        stale = event_log.LeaseAppend(
            run_id, epoch - 1, 1, [ev.tool_started("c1", "recent_errors", "x")], 0,
            read_claim=claim,
        )  # fmt: skip
        assert await event_log.append_as_lease_holders(conn, [stale]) == {}
        assert await _call(conn, run_id) is None  # fenced: no claim, no event
        moved = event_log.LeaseAppend(
            run_id, epoch, 0, [ev.tool_started("c1", "recent_errors", "x")], 0, read_claim=claim
        )
        assert await event_log.append_as_lease_holders(conn, [moved]) == {}  # wrong position
        assert await _call(conn, run_id) is None
        held = event_log.LeaseAppend(
            run_id, epoch, 1, [ev.tool_started("c1", "recent_errors", "x")], 0, read_claim=claim
        )
        assert await event_log.append_as_lease_holders(conn, [held]) == {run_id: False}
        row = await _call(conn, run_id)
        assert (row["status"], row["claimed_epoch"]) == ("executing", epoch)
        assert row["args"] == {"service": "x"} and row["idempotency_key"] == f"{run_id}:c1"
        assert [s for s, _ in await event_log.read_after(conn, run_id, 0, 10)] == [1, 2]


async def test_a_writer_commits_the_claim_in_the_shared_statement(
    pool: Any, private_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with pool.acquire() as conn:
        run_id, epoch = await _running(conn)
    shared = count_shared_appends(monkeypatch)
    bus = EventBus(private_env["REDIS_URL"])
    await bus.start()
    try:
        writer = RunWriter(pool, bus, EventSink(pool, bus), run_id, epoch, 1)
        before = dict(COUNTS)
        claim = ClaimRead(run_id, "c1", "recent_errors", {"service": "x"}, f"{run_id}:c1", epoch)
        await writer.commit([ev.tool_started("c1", "recent_errors", "x")], claim)
        spent = {k: v - before.get(k, 0) for k, v in COUNTS.items() if v != before.get(k, 0)}
    finally:
        await bus.close()
    assert shared == [1]  # through the EventSink, not a transaction of the writer's own
    assert spent == {
        "select": 1
    }  # one statement (run_append): no BEGIN, no separate INSERT, no COMMIT
    async with pool.acquire() as conn:
        row = await _call(conn, run_id)
    assert (row["status"], row["claimed_epoch"]) == ("executing", epoch)
    assert writer.last_sequence == 2


async def _user(conn: Any, run_id: str) -> str:
    return str(await conn.fetchval("SELECT user_id FROM run WHERE id = $1", run_id))


def _claim(run_id: str, action: str | None, scope: str = "") -> event_log.ReadClaim:
    return event_log.ReadClaim("c1", "logs", '{"service": "x"}', f"{run_id}:c1", action, scope)


# (grant held, scope the call needs): the SQL's verdict must be grants.matches' (store/grants.py).
MATCH_CASES = [
    ("*", "payment-api/prod"),
    ("payment-api/prod", "payment-api/prod"),
    ("payment-api/*", "payment-api/prod"),
    ("*/prod", "payment-api/prod"),
    ("payment-api/*", "checkout-web/prod"),
    ("payment-api", "payment-api/prod"),
    ("payment-api/prod/eu", "payment-api/prod"),
    ("payment-api/staging", "payment-api/prod"),
]


async def test_a_claim_that_needs_a_grant_is_written_only_for_a_user_who_holds_it(
    pool: Any,
) -> None:
    """The read tool's grant, checked by the statement that claims the call (migration 0023):
    without it nothing of the append is written and the run comes back denied, not fenced; the
    scopes match as store/grants.py's matcher says, case by case."""
    async with pool.acquire() as conn:
        run_id, epoch = await _running(conn)
        user = await _user(conn, run_id)

        refused = await event_log.append_as_lease_holders(
            conn, [append_for(run_id, epoch, _claim(run_id, "claims.read", "payment-api/prod"))]
        )
        assert refused == {} and refused.denied == {run_id}
        assert await _call(conn, run_id) is None
        assert [s for s, _ in await event_log.read_after(conn, run_id, 0, 10)] == [1]
        stale = await event_log.append_as_lease_holders(
            conn, [append_for(run_id, epoch - 1, _claim(run_id, "claims.read", "payment-api/prod"))]
        )
        assert stale == {} and stale.denied == frozenset()  # fenced, not denied
        await grants.add(conn, user, "claims.read", "payment-api/*")
        held = await event_log.append_as_lease_holders(
            conn, [append_for(run_id, epoch, _claim(run_id, "claims.read", "payment-api/prod"))]
        )
        assert held == {run_id: False} and held.denied == frozenset()
        assert (await _call(conn, run_id))["status"] == "executing"

    for pattern, scope in MATCH_CASES:
        async with pool.acquire() as conn:
            run_id, epoch = await _running(conn)
            await grants.add(conn, await _user(conn, run_id), "cases.read", pattern)
            out = await event_log.append_as_lease_holders(
                conn, [append_for(run_id, epoch, _claim(run_id, "cases.read", scope))]
            )
            await grants.revoke(conn, await _user(conn, run_id), "cases.read", pattern)
        assert (run_id in out) == grants.matches(pattern, scope), (pattern, scope)
        assert (run_id in out.denied) != grants.matches(pattern, scope), (pattern, scope)


def append_for(run_id: str, epoch: int, claim: event_log.ReadClaim) -> event_log.LeaseAppend:
    return event_log.LeaseAppend(
        run_id, epoch, 1, [ev.tool_started("c1", "logs", "x")], 0, read_claim=claim
    )


async def test_a_denied_claim_fails_alone_and_the_writes_queued_with_it_commit(
    pool: Any, private_env: dict[str, str]
) -> None:
    """A writer whose claim is refused: its commit raises Denied with nothing of it written,
    the text queued before it is committed next, in order, and the denial's own commit (the
    claim without the grant, its `tool_finished`) follows. With the grant held, the claim is
    still one statement (the grant check rode it: no round trip of its own)."""
    async with pool.acquire() as conn:
        run_id, epoch = await _running(conn)
        user = await _user(conn, run_id)
    bus = EventBus(private_env["REDIS_URL"])
    await bus.start()
    try:
        writer = RunWriter(pool, bus, EventSink(pool, bus), run_id, epoch, 1)
        claim = ClaimRead(run_id, "c1", "logs", {"service": "x"}, f"{run_id}:c1", epoch)
        needing = replace(claim, grant=ReadGrant(user, "claims.read", "payment-api/prod"))
        await writer.emit([ev.text_delta("msg_1", "checking")])
        with pytest.raises(event_log.Denied):
            await writer.commit([ev.tool_started("c1", "logs", "x")], needing)
        await writer.commit([ev.tool_finished("c1", "logs", False, "denied")], claim)
        async with pool.acquire() as conn:
            kinds = [
                ev.RunEvent.FromString(data).WhichOneof("event")
                for _, data in await event_log.read_after(conn, run_id, 1, 10)
            ]
            assert kinds == ["text_delta", "tool_finished"]
            await grants.add(conn, user, "claims.read", "payment-api/*")
        other = ClaimRead(run_id, "c2", "logs", {"service": "x"}, f"{run_id}:c2", epoch)
        before = dict(COUNTS)
        await writer.commit(
            [ev.tool_started("c2", "logs", "x")],
            replace(other, grant=ReadGrant(user, "claims.read", "payment-api/prod")),
        )
        spent = {k: v - before.get(k, 0) for k, v in COUNTS.items() if v != before.get(k, 0)}
    finally:
        await bus.close()
    assert spent == {"select": 1}
    assert writer.last_sequence == 4
