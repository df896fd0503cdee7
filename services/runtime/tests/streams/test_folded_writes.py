"""A run's own state changes folded into the fenced append (event_log.LeaseAppend, RunWriter's
Fold): a read call's result with the facts it confirms, and the run's end with its answer and
webhook deliveries, written with their events in ONE statement when the lease and position hold,
and not at all when they do not (a zombie finishes nothing, ends nothing, announces nothing).
A writer sends them through the EventSink's shared statement, not a transaction of its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tether_common.ids import new_id
from tether_common.run_bus import EventBus
from tether_runtime.domain import events as ev
from tether_runtime.store import conversations, event_log, interrupts, runs, webhook_endpoints
from tether_runtime.store.event_log import CallFinish, LeaseAppend, RunEnd
from tether_runtime.store.statement_count import COUNTS
from tether_runtime.streams.event_sink import EventSink
from tether_runtime.streams.run_writer import (
    ClaimRead,
    EndRun,
    FinishRead,
    Interrupted,
    RunWriter,
    SaveCheckpoint,
)
from tether_testkit.running_runs import running_run
from tether_testkit.shared_appends import count_shared_appends

SECRET = "a-test-secret-of-enough-length"


@pytest.fixture
async def bus(private_env: dict[str, str]) -> AsyncIterator[EventBus]:
    bus = EventBus(private_env["REDIS_URL"])
    await bus.start()
    yield bus
    await bus.close()


async def _running(conn: Any, conv_id: str = "") -> tuple[str, int, str]:
    """A claimed run (its log holds run_started): (run id, epoch, conversation id)."""
    if not conv_id:
        conv_id = (await conversations.create(conn, "alice", "folds")).id
    run = await running_run(conn, conversation_id=conv_id, claim=32)
    return run.id, run.lease_epoch, conv_id


async def _claimed_call(conn: Any, run_id: str, epoch: int, call_id: str = "c1") -> None:
    claim = event_log.ReadClaim(call_id, "recent_errors", "{}", f"{run_id}:{call_id}")
    append = LeaseAppend(
        run_id, epoch, 1, [ev.tool_started(call_id, "recent_errors", "")], 0, read_claim=claim
    )
    assert await event_log.append_as_lease_holders(conn, [append]) == {run_id: False}


def _result(call_id: str, facts: dict[str, Any]) -> CallFinish:
    body = {"ok": True, "summary": "3 errors", "data": {"n": 3}, "facts": facts, "outcome": "ok"}
    return CallFinish(call_id, True, "3 errors", json.dumps(body), json.dumps(facts))


def _finished(call_id: str) -> list[ev.RunEvent]:
    return [ev.tool_finished(call_id, "recent_errors", True, "3 errors")]


async def test_a_result_is_stored_with_its_facts_only_if_the_fence_holds(pool: Any) -> None:
    async with pool.acquire() as conn:
        run_id, epoch, conv_id = await _running(conn)
        await _claimed_call(conn, run_id, epoch)
        result = _result("c1", {"service": "payment-api"})
        stale = LeaseAppend(run_id, epoch - 1, 2, _finished("c1"), 0, call_finish=result)
        moved = LeaseAppend(run_id, epoch, 1, _finished("c1"), 0, call_finish=result)
        for zombie in (stale, moved):
            assert await event_log.append_as_lease_holders(conn, [zombie]) == {}
            row = await conn.fetchrow(
                "SELECT status, result FROM tool_call WHERE run_id = $1", run_id
            )
            assert (row["status"], row["result"]) == ("executing", None)
            conv = await conversations.get(conn, conv_id)
            assert conv is not None and (conv.facts, conv.version) == ({}, 1)
        held = LeaseAppend(run_id, epoch, 2, _finished("c1"), 0, call_finish=result)
        assert await event_log.append_as_lease_holders(conn, [held]) == {run_id: False}
        row = await conn.fetchrow(
            "SELECT status, result_summary, result FROM tool_call WHERE run_id = $1", run_id
        )
        assert (row["status"], row["result_summary"]) == ("succeeded", "3 errors")
        assert row["result"]["data"] == {"n": 3}
        conv = await conversations.get(conn, conv_id)
        assert conv is not None and (conv.facts, conv.version) == ({"service": "payment-api"}, 2)
        assert [s for s, _ in await event_log.read_after(conn, run_id, 0, 10)] == [1, 2, 3]


async def test_two_runs_of_one_conversation_merge_their_facts_in_one_statement(
    pool: Any,
) -> None:
    """A conversation's row is updated once per statement: both runs' facts land, in order."""
    async with pool.acquire() as conn:
        a, epoch_a, conv_id = await _running(conn)
        b, epoch_b, _ = await _running(conn, conv_id)
        await _claimed_call(conn, a, epoch_a)
        await _claimed_call(conn, b, epoch_b)
        appends = [
            LeaseAppend(a, epoch_a, 2, _finished("c1"), 0,
                        call_finish=_result("c1", {"service": "a", "env": "prod"})),
            LeaseAppend(b, epoch_b, 2, _finished("c1"), 0,
                        call_finish=_result("c1", {"service": "b", "instance": "b-1"})),
        ]  # fmt: skip
        assert await event_log.append_as_lease_holders(conn, appends) == {a: False, b: False}
        conv = await conversations.get(conn, conv_id)
    assert conv is not None
    assert conv.facts == {"service": "b", "env": "prod", "instance": "b-1"}
    assert conv.version == 3


async def test_an_end_with_its_answer_and_deliveries_only_if_the_fence_holds(pool: Any) -> None:
    async with pool.acquire() as conn:
        endpoint = await webhook_endpoints.add(
            conn, "http://127.0.0.1:9/hook", ["run.completed"], SECRET
        )
        run_id, epoch, conv_id = await _running(conn)
        answer_id = new_id("msg")
        end = RunEnd("completed", answer_id, "All quiet.")
        cp = json.dumps({"v": 2, "started": True, "input_tokens": 7, "output_tokens": 5})

        def done(expected: int, at_epoch: int) -> LeaseAppend:
            return LeaseAppend(
                run_id, at_epoch, expected, [ev.done(answer_id, 7, 5, 1)], 4,
                checkpoint=cp, reset_streamed=True, end=end,
            )  # fmt: skip

        for zombie in (done(1, epoch - 1), done(0, epoch)):
            assert await event_log.append_as_lease_holders(conn, [zombie]) == {}
            run = await runs.get(conn, run_id)
            assert run is not None and (run.status, run.last_sequence) == ("running", 1)
            assert await conn.fetchval("SELECT count(*) FROM message WHERE id = $1", answer_id) == 0
            assert await conn.fetchval("SELECT count(*) FROM webhook_delivery") == 0
        assert await event_log.append_as_lease_holders(conn, [done(1, epoch)]) == {run_id: False}
        row = await conn.fetchrow(
            "SELECT status, lease_owner, lease_expires_at, attempts, last_sequence, "
            "step_streamed, input_tokens, output_tokens FROM run WHERE id = $1",
            run_id,
        )
        assert dict(row) == {
            "status": "completed", "lease_owner": None, "lease_expires_at": None, "attempts": 0,
            "last_sequence": 2, "step_streamed": 0, "input_tokens": 7, "output_tokens": 5,
        }  # fmt: skip
        msg = await conn.fetchrow("SELECT * FROM message WHERE id = $1", answer_id)
        assert (msg["conversation_id"], msg["run_id"], msg["role"], msg["content"]) == (
            conv_id, run_id, "assistant", "All quiet.",
        )  # fmt: skip
        hooks = await conn.fetch("SELECT endpoint_id, event_type, payload FROM webhook_delivery")
    assert [(h["endpoint_id"], h["event_type"]) for h in hooks] == [(endpoint, "run.completed")]
    assert hooks[0]["payload"]["id"] == f"evt_{run_id}_2"
    assert hooks[0]["payload"]["data"]["conversationId"] == conv_id


async def _writer(
    pool: Any, bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> tuple[RunWriter, list[int], str, int, str]:
    async with pool.acquire() as conn:
        run_id, epoch, conv_id = await _running(conn)
    shared = count_shared_appends(monkeypatch)
    return (
        RunWriter(pool, bus, EventSink(pool, bus), run_id, epoch, 1),
        shared,
        run_id,
        epoch,
        conv_id,
    )


async def test_a_writer_commits_a_result_and_the_end_in_the_shared_statement(
    pool: Any, bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, shared, run_id, epoch, conv_id = await _writer(pool, bus, monkeypatch)
    save = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "started": True}), False)
    # A step's save waits for the first call's claim, and goes with it.
    step = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "started": True, "steps": 1}), True)
    writer.stage(step)
    await asyncio.sleep(0.05)
    assert shared == []  # nothing goes on its own
    await writer.commit(
        [ev.tool_started("c1", "recent_errors", "")],
        ClaimRead(run_id, "c1", "recent_errors", {}, f"{run_id}:c1", epoch),
    )
    assert shared == [1]
    async with pool.acquire() as conn:
        run = await runs.get(conn, run_id)
        assert run is not None and run.checkpoint.get("steps") == 1
    body = {"ok": True, "summary": "3 errors", "data": {}, "facts": {"k": 1}, "outcome": "ok"}
    before = dict(COUNTS)
    result = CallFinish("c1", True, "3 errors", json.dumps(body), '{"k": 1}')
    await writer.commit(_finished("c1"), FinishRead(run_id, epoch, conv_id, result, body, save))
    answer_id = new_id("msg")
    end = RunEnd("completed", answer_id, "done")
    await writer.emit([ev.text_delta(answer_id, "do")], streamed=2)  # deltas ride with the end
    await writer.commit(
        [ev.done(answer_id, 0, 0, 1)], EndRun(run_id, epoch, conv_id, end, '{"v": 2}')
    )
    spent = {k: v - before.get(k, 0) for k, v in COUNTS.items() if v != before.get(k, 0)}
    # Through the EventSink, one statement each: no BEGIN, no UPDATE of its own, no COMMIT.
    assert shared == [1, 1, 1] and spent == {"select": 2}
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT status FROM tool_call WHERE run_id = $1", run_id) == (
            "succeeded"
        )
        run = await runs.get(conn, run_id)
        assert run is not None and (run.status, run.last_sequence) == ("completed", 5)
        assert await conn.fetchval("SELECT content FROM message WHERE id = $1", answer_id) == "done"
        conv = await conversations.get(conn, conv_id)
        assert conv is not None and conv.facts == {"k": 1}
    kinds = [ev.kind_of(ev.RunEvent.FromString(d)) for _, d in await _log(pool, run_id)]
    assert kinds == ["run_started", "tool_started", "tool_finished", "text_delta", "done"]


async def test_a_claim_and_a_result_in_one_batch_take_a_transaction_and_both_land(
    pool: Any, bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One statement could not update the row it inserts: the writer falls back to statements
    of their own for what does not fold, and the outcome is the same."""
    writer, shared, run_id, epoch, conv_id = await _writer(pool, bus, monkeypatch)
    save = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "started": True}), False)
    body = {"ok": True, "summary": "none", "data": {}, "facts": {}, "outcome": "ok"}
    claim = ClaimRead(run_id, "c1", "recent_errors", {}, f"{run_id}:c1", epoch)
    result = CallFinish("c1", True, "none", json.dumps(body), None)
    # Queued together: the writer's drain takes both in one batch.
    before = dict(COUNTS)
    await asyncio.gather(
        asyncio.ensure_future(writer.commit([ev.tool_started("c1", "recent_errors", "")], claim)),
        asyncio.ensure_future(
            writer.commit(_finished("c1"), FinishRead(run_id, epoch, conv_id, result, body, save))
        ),
    )
    spent = {k: v - before.get(k, 0) for k, v in COUNTS.items() if v != before.get(k, 0)}
    # One transaction: the append with the claim folded, then the result's own statements.
    assert shared == [1] and spent["begin"] == spent["commit"] == 1
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT status, claimed_epoch FROM tool_call WHERE run_id = $1", run_id
        )
    assert (row["status"], row["claimed_epoch"]) == ("succeeded", epoch)
    assert writer.last_sequence == 3


async def _log(pool: Any, run_id: str) -> list[tuple[int, bytes]]:
    async with pool.acquire() as conn:
        return await event_log.read_after(conn, run_id, 0, 100)


def _raise_card(run_id: str, interrupt_id: str) -> Any:
    """A pause's own changes, as cards.show makes them: the call's row, then the interrupt."""

    async def raise_card(conn: Any) -> None:
        await interrupts.propose_call(conn, run_id, "c1", "scale", {"n": 2}, f"{run_id}:c1")
        await interrupts.create_interrupt(
            conn, interrupt_id, run_id, "c1", "confirm_action", "scale", "svc:x", {"t": "ok?"},
            datetime.now(UTC) + timedelta(hours=1),
        )  # fmt: skip

    return raise_card


async def _paused(pool: Any, run_id: str) -> tuple[Any, Any, Any]:
    async with pool.acquire() as conn:
        return (
            await conn.fetchrow(
                "SELECT status, lease_owner, lease_expires_at, attempts, step_streamed, "
                "checkpoint, last_sequence FROM run WHERE id = $1",
                run_id,
            ),
            await conn.fetchval("SELECT status FROM tool_call WHERE run_id = $1", run_id),
            await conn.fetchval("SELECT status FROM interrupt WHERE run_id = $1", run_id),
        )


async def test_an_interrupt_folds_its_checkpoint_and_the_pause_into_the_append(
    pool: Any, bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run pauses (cards.show): the checkpoint and the `interrupted` status ride the fenced
    append; the call's row and the interrupt follow it in the same transaction."""
    writer, shared, run_id, epoch, _ = await _writer(pool, bus, monkeypatch)
    await writer.emit([ev.text_delta("m1", "asking")], streamed=6)
    interrupt_id = new_id("int")
    raised = ev.interrupt(interrupt_id, "confirm_action", {}, datetime.now(UTC), "c1")
    save = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "asked": True}), False)
    before = dict(COUNTS)
    await writer.commit([raised], Interrupted(_raise_card(run_id, interrupt_id), save))
    spent = {k: v - before.get(k, 0) for k, v in COUNTS.items() if v != before.get(k, 0)}
    # The delta ahead of it through the shared statement; then BEGIN, the append (with the
    # checkpoint and the end), the two inserts, COMMIT: no UPDATE of the run of their own.
    assert shared == [1, 1] and spent == {"begin": 1, "select": 2, "insert": 2, "commit": 1}
    run, call, intr = await _paused(pool, run_id)
    assert (run["status"], run["lease_owner"], run["lease_expires_at"]) == (
        "interrupted",
        None,
        None,
    )
    assert run["attempts"] == 0 and run["checkpoint"] == {"v": 2, "asked": True}
    assert run["step_streamed"] == 6  # as runs.save_checkpoint without a reset left it
    assert (call, intr, run["last_sequence"]) == ("proposed", "pending", 3)

    # A zombie's pause writes nothing: not the call, not the interrupt, not the status.
    zombie, _, zombie_run, zombie_epoch, _ = await _writer(pool, bus, monkeypatch)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE run SET lease_epoch = lease_epoch + 1 WHERE id = $1", zombie_run)
    stale = SaveCheckpoint(zombie_run, zombie_epoch, json.dumps({"v": 2}), False)
    with pytest.raises(event_log.Fenced):
        await zombie.commit([raised], Interrupted(_raise_card(zombie_run, new_id("int")), stale))
    run, call, intr = await _paused(pool, zombie_run)
    assert (run["status"], call, intr) == ("running", None, None)


async def test_a_pause_that_cannot_fold_makes_the_same_changes_itself(pool: Any) -> None:
    """After another end in the batch the pause does not fold (`fold` gives itself back); run
    as a state change of its own it leaves the run as the folded one does."""
    async with pool.acquire() as conn:
        run_id, epoch, _ = await _running(conn)
        interrupt_id = new_id("int")
        save = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "asked": True}), False)
        pause = Interrupted(_raise_card(run_id, interrupt_id), save)
        ended = LeaseAppend(run_id, epoch, 1, [], 0, end=RunEnd("failed"))
        assert pause.fold(ended) is pause and ended.checkpoint is None
        async with conn.transaction():
            await pause(conn)
    run, call, intr = await _paused(pool, run_id)
    assert (run["status"], run["lease_owner"], run["attempts"]) == ("interrupted", None, 0)
    assert run["checkpoint"] == {"v": 2, "asked": True}
    assert (call, intr) == ("proposed", "pending")


async def test_a_sent_announcement_shares_the_next_commits_statement(
    pool: Any, bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driven agent's node announces its tool call (`send`: the event with the checkpoint
    that records it, not waited for) and ends (a commit): one shared statement for both, in
    order, durable when the commit returns. A sent write that is fenced fails the commit."""
    writer, shared, run_id, epoch, _ = await _writer(pool, bus, monkeypatch)
    announced = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "started": ["c1"]}), False)
    writer.send([ev.tool_started("c1", "send_email", "to bob")], announced)
    ended = SaveCheckpoint(run_id, epoch, json.dumps({"v": 2, "started": ["c1"], "n": 1}), True)
    before = dict(COUNTS)
    await writer.commit([ev.graph_update("model", {"x": 1}, 0)], ended)
    spent = {k: v - before.get(k, 0) for k, v in COUNTS.items() if v != before.get(k, 0)}
    assert shared == [1] and spent == {"select": 1}
    kinds = [ev.kind_of(ev.RunEvent.FromString(d)) for _, d in await _log(pool, run_id)]
    assert kinds == ["run_started", "tool_started", "graph_update"]
    async with pool.acquire() as conn:
        run = await runs.get(conn, run_id)
    assert run is not None and run.checkpoint == {"v": 2, "started": ["c1"], "n": 1}

    zombie, _, zombie_run, zombie_epoch, _ = await _writer(pool, bus, monkeypatch)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE run SET lease_epoch = lease_epoch + 1 WHERE id = $1", zombie_run)
    stale = SaveCheckpoint(zombie_run, zombie_epoch, json.dumps({"v": 2}), False)
    zombie.send([ev.tool_started("c1", "send_email", "to bob")], stale)
    with pytest.raises(event_log.Fenced):
        await zombie.commit([], stale)
    assert [s for s, _ in await _log(pool, zombie_run)] == [1]
