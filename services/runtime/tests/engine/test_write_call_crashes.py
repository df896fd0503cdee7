"""The crash windows of a write call, for both kinds of write tool through the one machine
(write_call.py): a native write tool (as tool_calls.py builds it) and a graph write tool (as
driven.py builds it). A worker "killed" (its task cancelled, nothing after runs) before the
write, inside it (the effect made, no result stored) or after it (the result stored); another
worker takes the run over with the next lease epoch. Same assertions for both kinds: a call
that honours its key is called again with the same key (one effect); one that does not makes a
person decide (outcome_unknown), never calls again on its own; a stored call cannot be claimed
again."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from tether_common.ids import new_id
from tether_runtime.domain import events as ev
from tether_runtime.engine.checkpoint import PendingCall
from tether_runtime.engine.driven import DrivenRun
from tether_runtime.engine.run_outcomes import Paused
from tether_runtime.engine.tool_calls import ToolCalls
from tether_runtime.engine.write_call import WriteCall
from tether_runtime.store import conversations, event_log, interrupts, runs
from tether_runtime.store.db import db_now
from tether_runtime.streams.run_writer import Apply, SaveCheckpoint
from tether_sdk import Limits, ToolContext, tool

USER = "alice"


class Host:
    """The run as its collaborators see it (run_context.py), on a real store."""

    def __init__(self, pool: Any, run: Any) -> None:
        self.pool = pool
        self.run = run
        self.run_id = run.id
        self.epoch = run.lease_epoch
        self.interrupt_ttl_s = 60.0
        self.loaded = SimpleNamespace(
            name="crashy", state=None, agent=SimpleNamespace(limits=Limits(retry_backoff_s=0.01))
        )

    async def db_now(self) -> datetime:
        return await db_now(self.pool)

    async def commit(self, events: list[ev.RunEvent], apply: Apply | None = None) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            if events:
                await event_log.append(conn, self.run_id, events, epoch=self.epoch)
            if apply is not None:
                await apply(conn)

    def save(self, *, reset_streamed: bool = False) -> SaveCheckpoint:
        return SaveCheckpoint(self.run_id, self.epoch, json.dumps({}), reset_streamed)

    def time_left(self) -> float:
        return 30.0

    async def emit(self, events: list[ev.RunEvent], *, streamed: int = 0) -> None:
        await self.commit(events)


class Ledger:
    """The outside world: every call with its key, the effects (deduped by key when the tool
    honours it), and where a call waits to be killed."""

    def __init__(self, keyed: bool) -> None:
        self.keyed = keyed
        self.calls: list[str] = []
        self.effects: list[str] = []
        self.hold = ""
        self.reached = asyncio.Event()

    async def send(self, key: str) -> str:
        self.calls.append(key)
        if self.hold == "before":
            self.reached.set()
            await asyncio.Event().wait()
        if not (self.keyed and key in self.effects):
            self.effects.append(key)
        if self.hold == "inside":
            self.reached.set()
            await asyncio.Event().wait()
        return "sent"


def native(host: Host, ledger: Ledger, call_id: str) -> WriteCall:
    @tool(effect="write", action="ledger.send", idempotent_by_key=ledger.keyed)
    async def send(ctx: ToolContext, recipient: str) -> str:
        """Send."""
        return await ledger.send(ctx.idempotency_key)

    call = PendingCall(call_id, "send", {"recipient": "bob"})
    return ToolCalls(host)._machine(call, send, {"recipient": "bob"}, "ledger/bob")


def graph(host: Host, ledger: Ledger, call_id: str) -> WriteCall:
    return DrivenRun(host)._machine(
        call_id, "send", {"recipient": "bob"}, "ledger.send", "ledger/bob",
        ledger.send, ledger.keyed, None,
    )  # fmt: skip


KINDS = {"native": native, "graph": graph}


async def _claimed_run(pool: Any) -> Any:
    async with pool.acquire() as conn:
        conv = await conversations.create(conn, USER, "crashes")
        run_id = new_id("run")
        msg = await conversations.add_message(conn, conv.id, "user", "send", run_id=run_id)
        await runs.create(conn, run_id, conv.id, USER, msg.id, "crashy", {})
        claimed = await runs.claim_next(conn, "A", 30)
    assert claimed is not None
    return claimed[0]


async def _take_over(pool: Any, run_id: str) -> Any:
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE run SET lease_expires_at = now() - interval '1 second' WHERE id = $1", run_id
        )
        claimed = await runs.claim_next(conn, "B", 30)
    assert claimed is not None and claimed[0].lease_epoch == 2
    return claimed[0]


async def _first_worker(pool: Any, kind: str, ledger: Ledger, window: str) -> tuple[str, str, str]:
    """Worker A claims the call and calls the tool; killed in `window`."""
    run = await _claimed_run(pool)
    a = Host(pool, run)
    call_id = "call_1_0"
    key = f"{run.id}:{call_id}"
    machine = KINDS[kind](a, ledger, call_id)
    if kind == "native":  # a native write is proposed, then approved by a person
        async with pool.acquire() as conn:
            await interrupts.propose_call(conn, run.id, call_id, "send", machine.w.args, key)
            await conn.execute("UPDATE tool_call SET status = 'approved' WHERE run_id = $1", run.id)
        await a.commit([ev.tool_started(call_id, "send", "")], machine.claim(key, "approved"))
    else:
        await a.commit([ev.tool_started(call_id, "send", "")], machine.claim(key, "new"))
    ledger.hold = "" if window == "after" else window

    async def work() -> None:
        body = await machine.perform(key, None)
        await a.commit([], machine.finish(body))

    task = asyncio.create_task(work())
    if window == "after":
        await task
    else:
        await asyncio.wait_for(ledger.reached.wait(), 10)
        task.cancel()  # kill -9: nothing after this point of the call runs
        with pytest.raises(asyncio.CancelledError):
            await task
    ledger.hold = ""
    return run.id, call_id, key


async def _status(pool: Any, run_id: str) -> str:
    async with pool.acquire() as conn:
        return str(await conn.fetchval("SELECT status FROM tool_call WHERE run_id = $1", run_id))


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("window", ["before", "inside"])
async def test_a_keyed_write_killed_in_the_call_is_called_again_with_its_key(
    pool: Any, kind: str, window: str
) -> None:
    ledger = Ledger(keyed=True)
    run_id, call_id, key = await _first_worker(pool, kind, ledger, window)
    assert await _status(pool, run_id) == "executing"
    b = Host(pool, await _take_over(pool, run_id))
    machine = KINDS[kind](b, ledger, call_id)
    body = await machine.recover(key, None)
    await b.commit([], machine.finish(body))
    assert body["ok"] and body["summary"] == "sent"
    assert ledger.calls == [key, key] and ledger.effects == [key]
    assert await _status(pool, run_id) == "succeeded"


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("window", ["before", "inside"])
async def test_an_unkeyed_write_killed_in_the_call_asks_a_person(
    pool: Any, kind: str, window: str
) -> None:
    ledger = Ledger(keyed=False)
    run_id, call_id, key = await _first_worker(pool, kind, ledger, window)
    effects = list(ledger.effects)
    assert effects == ([] if window == "before" else [key])
    b = Host(pool, await _take_over(pool, run_id))
    with pytest.raises(Paused):
        await KINDS[kind](b, ledger, call_id).recover(key, None)
    assert ledger.calls == [key] and ledger.effects == effects, "called again on its own"
    assert await _status(pool, run_id) == "unknown"
    async with pool.acquire() as conn:
        intr = await interrupts.for_call(conn, run_id, call_id)
        run_status = await conn.fetchval("SELECT status FROM run WHERE id = $1", run_id)
    assert intr is not None and intr.kind == "outcome_unknown" and intr.status == "pending"
    assert intr.payload["title"] == "Did send happen?" and intr.payload["target"] == "ledger/bob"
    assert "cannot tell whether it happened" in intr.payload["details"]
    assert run_status == "interrupted"


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_write_killed_after_its_result_was_stored_is_never_claimed_again(
    pool: Any, kind: str
) -> None:
    ledger = Ledger(keyed=False)
    run_id, call_id, key = await _first_worker(pool, kind, ledger, "after")
    assert await _status(pool, run_id) == "succeeded"
    b = Host(pool, await _take_over(pool, run_id))
    with pytest.raises(event_log.Fenced):
        await KINDS[kind](b, ledger, call_id).recover(key, None)
    assert ledger.calls == [key] and ledger.effects == [key]
    assert await _status(pool, run_id) == "succeeded"
