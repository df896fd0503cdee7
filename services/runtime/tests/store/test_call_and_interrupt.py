"""A tool call's row and the latest interrupt raised on it, in one statement
(interrupts.call_and_interrupt: a graph's question asks it each time its node runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tether_common.ids import new_id
from tether_runtime.store import interrupts
from tether_runtime.store.statement_count import COUNTS
from tether_testkit.running_runs import running_run


async def test_none_until_both_exist_then_the_latest_interrupt(pool: Any) -> None:
    async with pool.acquire() as conn:
        run = await running_run(conn, "asks")
        before = sum(COUNTS.values())
        assert await interrupts.call_and_interrupt(conn, run.id, "k1") is None
        assert sum(COUNTS.values()) - before == 1
        await interrupts.propose_call(conn, run.id, "k1", "provide_input", {"q": 1}, "k1")
        assert await interrupts.call_and_interrupt(conn, run.id, "k1") is None  # not asked yet

        expires = datetime.now(UTC) + timedelta(hours=1)
        first, second = new_id("int"), new_id("int")
        for interrupt_id, payload in ((first, {"n": "1"}), (second, {"n": "2"})):
            await interrupts.create_interrupt(
                conn, interrupt_id, run.id, "k1", "provide_input", "", "", payload, expires
            )
            if interrupt_id == first:
                await conn.execute(
                    "UPDATE interrupt SET status = 'resolved', decision = 'answered' WHERE id = $1",
                    first,
                )
        found = await interrupts.call_and_interrupt(conn, run.id, "k1")
        assert found is not None
        call, intr = found
        assert (call.call_id, call.args, call.idempotency_key) == ("k1", {"q": 1}, "k1")
        assert (intr.id, intr.status, intr.payload, intr.expires_at) == (
            second,
            "pending",
            {"n": "2"},
            expires,
        )
        assert intr == await interrupts.for_call(conn, run.id, "k1")
        assert call == await interrupts.get_call(conn, run.id, "k1")
        assert await interrupts.call_and_interrupt(conn, run.id, "k2") is None
