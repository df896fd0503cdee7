"""A finished run's checkpoint is compacted once it has been finished for
TETHER_CHECKPOINT_COMPACT_AFTER_S (issue 18): the transcript goes, GetRun reports the same usage,
the answer stays in the conversation; runs finished more recently, and runs still waiting for a
person, keep their whole checkpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

AFTER_S = 600


@pytest.fixture
async def db(private_env: dict[str, str]) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(private_env["DATABASE_URL"])
    yield conn
    await conn.close()


async def _checkpoint(db: asyncpg.Connection, run_id: str) -> dict[str, object]:
    return dict(
        json.loads(await db.fetchval("SELECT checkpoint::text FROM run WHERE id = $1", run_id))
    )


async def test_finished_runs_are_compacted_after_the_window_and_keep_their_usage(
    private_env: dict[str, str], procs: list[Proc], db: asyncpg.Connection
) -> None:
    env = {
        **private_env,
        "TETHER_CHECKPOINT_COMPACT_AFTER_S": str(AFTER_S),
        "TETHER_POLL_INTERVAL_S": "0.5",
    }
    runtime = start_runtime(env, name="rt-compact")
    procs.append(runtime)
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        old, recent = [], ""
        for n in (3, 4):
            conv = await c.conversation()
            run = (await c.start(conv, f"stream {n} deltas")).run
            assert types(await c.events(run.id))[-1] == "done"
            old.append(run.id)
        conv = await c.conversation()
        recent = (await c.start(conv, "stream 2 deltas")).run.id
        await c.events(recent)
        waiting = (await c.start(await c.conversation(), "scale payment-api")).run.id
        assert types(await c.events(waiting, until="interrupt"))[-1] == "interrupt"

        before = {
            r: await c.stub.GetRun(pb.GetRunRequest(run_id=r), metadata=c.md, timeout=10)
            for r in old
        }
        assert all(b.run.usage.model_steps >= 1 for b in before.values())
        full = await _checkpoint(db, old[0])
        assert full.get("messages")
        # Finished (or paused) longer ago than the window.
        await db.execute(
            "UPDATE run SET updated_at = now() - make_interval(secs => $2) "
            "WHERE id = ANY($1::text[])",
            [*old, waiting],
            AFTER_S + 60.0,
        )
        ended_at = {
            r: await db.fetchval("SELECT updated_at FROM run WHERE id = $1", r) for r in old
        }
        deadline = time.monotonic() + 30
        while await db.fetchval(
            "SELECT count(*) FROM run WHERE id = ANY($1::text[]) AND checkpoint_compacted", old
        ) < len(old):
            assert time.monotonic() < deadline, "the finished runs were never compacted"
            await asyncio.sleep(0.2)

        for r in old:
            cp = await _checkpoint(db, r)
            assert cp["compacted"] is True and "messages" not in cp and "pending" not in cp
            assert cp["message_id"] and set(cp) <= {
                "compacted",
                "started",
                "v",
                "message_id",
                "steps",
                "input_tokens",
                "output_tokens",
                "step_usage",
                "active_s",
            }
            if r == old[0]:
                assert cp["message_id"] == full["message_id"]
            after = await c.stub.GetRun(pb.GetRunRequest(run_id=r), metadata=c.md, timeout=10)
            assert after.run.usage == before[r].run.usage
            # Compaction is not a change of the run: its update time stays when it ended.
            assert await db.fetchval("SELECT updated_at FROM run WHERE id = $1", r) == ended_at[r]
            # The answer is still the conversation's.
            assert (
                await db.fetchval(
                    "SELECT count(*) FROM message WHERE run_id = $1 AND role = 'assistant'", r
                )
                == 1
            )
        # Recently finished, and waiting for a person: whole.
        assert (await _checkpoint(db, recent)).get("messages")
        assert (await _checkpoint(db, waiting)).get("pending")
        assert not await db.fetchval("SELECT checkpoint_compacted FROM run WHERE id = $1", waiting)
    finally:
        await c.close()
