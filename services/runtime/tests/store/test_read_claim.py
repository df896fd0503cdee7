"""A read-only tool call's claim folded into the fenced append (event_log.ReadClaim, RunWriter's
ClaimRead): written with its tool_started in one statement when the lease and position hold, not
at all when they do not (invariant: a zombie claims nothing), and through the shared statement
of the EventSink rather than a transaction of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether_runtime.domain import events as ev
from tether_runtime.store import event_log
from tether_runtime.store.db import create_pool
from tether_runtime.store.statement_count import COUNTS
from tether_runtime.streams.bus import EventBus
from tether_runtime.streams.event_sink import EventSink
from tether_runtime.streams.run_writer import ClaimRead, RunWriter
from tether_testkit.running_runs import running_run
from tether_testkit.shared_appends import count_shared_appends


@pytest.fixture
async def pool(private_env: dict[str, str]) -> AsyncIterator[Any]:
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=2)
    yield pool
    await pool.close()


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
