"""The worker's batched claim and the bus's subscription confirmation, against the real stores."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from tether_common import run_bus as bus_module
from tether_common.ids import new_id, new_id_after
from tether_common.run_bus import EventBus, Subscription
from tether_runtime.domain import events as ev
from tether_runtime.domain.records import RunRow
from tether_runtime.store import conversations, event_log, runs
from tether_runtime.store.db import create_pool
from tether_runtime.streams import event_sink
from tether_runtime.streams.event_sink import MAX_STATEMENT_EVENTS, EventSink
from tether_runtime.streams.run_writer import RunWriter, SaveCheckpoint, ThenSave
from tether_testkit.loop_timers import count_timers
from tether_testkit.running_runs import queued_run


@pytest.fixture
async def store(private_env: dict[str, str]) -> AsyncIterator[Any]:
    """A connection set up as the runtime's pool sets up its own (JSON codecs)."""
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=1)
    async with pool.acquire() as conn:
        yield conn
    await pool.close()


async def _queued_runs(conn: Any, n: int) -> list[str]:
    conv = await conversations.create(conn, "alice", "claims")
    ids = []
    for i in range(n):
        run_id, run = await queued_run(conn, conv.id, text=f"hi {i}")
        assert run is not None and run.status == "queued" and run.last_sequence == 1
        ids.append(run_id)
    return ids


async def test_claim_batch_takes_the_oldest_first_and_each_run_once(store: Any) -> None:
    ids = await _queued_runs(store, 5)
    first = await runs.claim_batch(store, "A", 30, 3)
    assert [r.id for r, _ in first] == ids[:3]  # oldest first
    assert all(r.status == "running" and r.lease_owner == "A" for r, _ in first)
    assert all(r.lease_epoch == 1 and not took_over for r, took_over in first)
    rest = await runs.claim_batch(store, "B", 30, 10)
    assert [r.id for r, _ in rest] == ids[3:]  # only what was still queued
    assert await runs.claim_batch(store, "C", 30, 10) == []
    # A lease that ran out is taken over, with a new epoch, and says so.
    await store.execute(
        "UPDATE run SET lease_expires_at = now() - interval '1 second' WHERE id = $1", ids[0]
    )
    ((run, took_over),) = await runs.claim_batch(store, "C", 30, 10)
    assert run.id == ids[0] and took_over and run.lease_epoch == 2 and run.lease_owner == "C"


async def test_events_are_stamped_when_the_statement_that_writes_them_is_built(
    store: Any,
) -> None:
    """An event's time is when it was written: a batch queued behind another statement is not
    stamped with the time it was queued. A fenced append stores nothing."""
    (run_id,) = await _queued_runs(store, 1)
    ((run, _),) = await runs.claim_batch(store, "A", 30, 1)
    queued = time.time()
    append = event_log.LeaseAppend(run_id, run.lease_epoch, 1, [ev.text_delta("m", "hi")], 2)
    assert append.rows == []  # nothing is numbered or encoded before it is written
    await asyncio.sleep(0.05)
    before = time.time()
    held = await event_log.append_as_lease_holders(store, [append])
    assert held == {run_id: False}
    ((seq, data),) = await event_log.read_after(store, run_id, 1, 10)
    stored = ev.RunEvent.FromString(data)
    assert seq == 2 and stored.sequence == 2 and stored.run_id == run_id
    assert stored.time.ToNanoseconds() / 1e9 >= before > queued + 0.04
    assert append.encoded == [data] and append.new_last == 2
    # Another epoch's append is fenced: nothing stored, the position unchanged.
    stale = event_log.LeaseAppend(run_id, run.lease_epoch - 1, 2, [ev.text_delta("m", "x")], 1)
    assert await event_log.append_as_lease_holders(store, [stale]) == {}
    assert [s for s, _ in await event_log.read_after(store, run_id, 0, 10)] == [1, 2]


async def test_start_refuses_another_users_conversation_and_writes_nothing(
    store: Any,
) -> None:
    conv = await conversations.create(store, "alice", "mine")
    _, started = await queued_run(store, conv.id, user="mallory")
    assert started is None
    for table in ("run", "message", "run_event"):
        assert await store.fetchval(f"SELECT count(*) FROM {table}") == 0, table


async def _connected(bus: EventBus) -> None:
    """The bus's reader connects in the background: wait (a while) until it has."""
    for _ in range(100):
        if bus.connected:
            return
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _subscribed(redis_url: str, run_id: str) -> AsyncIterator[tuple[EventBus, Subscription]]:
    """A started bus, connected, with a subscription to the run's channel Redis confirmed."""
    bus = EventBus(redis_url)
    await bus.start()
    try:
        await _connected(bus)
        with bus.subscribe(run_id) as sub:
            assert await bus.confirmed(sub)
            yield bus, sub
    finally:
        await bus.close()


async def test_a_confirmed_subscription_misses_nothing_published_after(redis_url: str) -> None:
    async with _subscribed(redis_url, "run_confirm") as (bus, sub):
        # Published right after confirmation, with no sleep: it must arrive.
        await bus.publish("run_confirm", [b"\x08\x01"])
        data = await asyncio.wait_for(sub.queue.get(), 5)
        assert data and not sub.overflowed


async def test_publishes_that_overlap_all_arrive(redis_url: str) -> None:
    """Publishes go out on the bus's held connection one round trip at a time; one made while
    another is in flight (a resume's beside the event sink's) takes the client's pool instead
    of waiting: all arrive, and the held connection carried some of them."""
    async with _subscribed(redis_url, "run_overlap") as (bus, sub):
        trip = bus._trip
        assert trip is not None
        sent = trip.send
        on_trip: list[int] = []

        async def counted(commands: Any) -> list[Any]:
            on_trip.append(len(commands))
            return await sent(commands)

        trip.send = counted  # type: ignore[method-assign]
        await asyncio.gather(
            *(bus.publish("run_overlap", [bytes([8, i])]) for i in range(1, 6)),
            bus.publish_many([("run_overlap", [b"\x08\x06"]), ("run_other", [b"\x08\x01"])]),
        )
        got = [await asyncio.wait_for(sub.queue.get(), 5) for _ in range(6)]
        assert len(got) == 6 and sub.queue.empty() and not sub.overflowed
        assert on_trip and sum(on_trip) < 7, on_trip  # some overlapped: the pool took those
        assert bus.publish_failures == 0


async def test_a_subscription_change_writes_without_a_task_of_its_own(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The subscriber connection has no socket timeout (redis-py's default would wrap each
    SUBSCRIBE and UNSUBSCRIBE written in wait_for: a task and a timer); a change is bounded as
    a whole by COMMAND_TIMEOUT_S instead."""
    bus = EventBus(redis_url)
    await bus.start()
    try:
        await _connected(bus)
        loop = asyncio.get_running_loop()
        tasks: list[str] = []
        create_task = loop.create_task

        def counting(coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            tasks.append(coro.__qualname__)
            return create_task(coro, **kwargs)

        monkeypatch.setattr(loop, "create_task", counting)
        armed = count_timers(monkeypatch)
        with bus.subscribe("run_change") as sub:
            assert await bus.confirmed(sub)
        assert bus._flusher is not None
        await bus._flusher  # the UNSUBSCRIBE
        assert tasks == ["EventBus._flush_changes", "EventBus._flush_changes"]
        assert len(armed) == 3  # each change's bound, and the confirmation's wait
    finally:
        await bus.close()


async def test_a_burst_of_subscriptions_goes_out_together_and_ends_in_the_right_state(
    redis_url: str,
) -> None:
    """Subscription changes made while one is in flight share the next SUBSCRIBE/UNSUBSCRIBE.
    Whatever a channel went through meanwhile, Redis ends up with its current state: a stream
    that left and came back is confirmed and hears publishes, one that left is unsubscribed."""
    bus = EventBus(redis_url)
    await bus.start()
    try:
        await _connected(bus)
        names = [f"run_burst_{i}" for i in range(60)]
        with contextlib.ExitStack() as stack:
            subs = [stack.enter_context(bus.subscribe(n)) for n in names]
            with bus.subscribe("run_gone"):
                pass  # subscribed and left before any command went out
            with bus.subscribe("run_back") as gone:
                pass
            with bus.subscribe("run_back") as back:
                assert gone is not back
                confirmed = await asyncio.gather(*(bus.confirmed(s) for s in [*subs, back]))
                assert all(confirmed)
                await bus.publish("run_back", [b"\x08\x01"])
                assert await asyncio.wait_for(back.queue.get(), 5)
                for n, sub in zip(names, subs, strict=True):
                    await bus.publish(n, [b"\x08\x02"])
                    assert await asyncio.wait_for(sub.queue.get(), 5)
        # Everything left: Redis is told, and no channel of this test stays subscribed.
        probe = aioredis.Redis.from_url(redis_url)
        try:
            for _ in range(100):
                counts = dict(await probe.pubsub_numsub(*names, "run_gone", "run_back"))
                if not any(counts.values()):
                    break
                await asyncio.sleep(0.05)
            assert not any(counts.values()), counts
        finally:
            await probe.aclose()
    finally:
        await bus.close()


async def test_confirmation_does_not_wait_while_redis_is_unreachable() -> None:
    bus = EventBus("redis://127.0.0.1:9/0")  # nothing listens on the discard port
    await bus.start()
    try:
        with bus.subscribe("run_nowhere") as sub:
            t0 = time.monotonic()
            assert not await bus.confirmed(sub)
            assert time.monotonic() - t0 < 0.5
    finally:
        await bus.close()


async def test_a_publish_arms_one_timer_and_no_task(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each publish (one batch, or several runs' in a pipeline) is bounded as a whole: one
    timer. Before, redis-py's socket timeout armed one per command written, with a task
    (wait_for), and one per answer read: a pipeline of k batches cost k + 1 timers."""
    bus = EventBus(redis_url)
    try:
        await bus.publish("run_warm", [b"\x08\x01"])  # the connection is made outside the count
        loop = asyncio.get_running_loop()
        tasks: list[object] = []
        create_task = loop.create_task

        def counting(coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            tasks.append(coro)
            return create_task(coro, **kwargs)

        monkeypatch.setattr(loop, "create_task", counting)
        armed = count_timers(monkeypatch)
        await bus.publish("run_one", [b"\x08\x01"])
        await bus.publish_many([(f"run_{i}", [b"\x08\x01"]) for i in range(10)])
        assert len(armed) == 2
        # No wait_for task per command written, and no pool release either (redis-py's pipeline
        # shielded one in a task): the publishes go on a held connection (redis_round_trip.py).
        assert tasks == []
        assert bus.publish_failures == 0
    finally:
        await bus.close()


async def test_a_publish_to_a_redis_that_never_answers_is_given_up_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client has no socket timeout of its own: the publish's bound is what ends it."""
    monkeypatch.setattr(bus_module, "PUBLISH_TIMEOUT_S", 0.3)
    held: list[asyncio.StreamWriter] = []

    async def accept_and_stay_silent(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)

    server = await asyncio.start_server(accept_and_stay_silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    bus = EventBus(f"redis://127.0.0.1:{port}/0")
    try:
        t0 = time.monotonic()
        await bus.publish("run_silent", [b"\x08\x01"])
        await bus.publish_many([("run_a", [b"\x08\x01"]), ("run_b", [b"\x08\x01"])])
        assert bus.publish_failures == 2
        assert time.monotonic() - t0 < 1.5
        assert not await bus.ping()
    finally:
        await bus.close()
        for w in held:
            w.close()
        server.close()


async def test_a_started_run_carries_its_answer_id_and_every_claim_the_same_starting_turns(
    private_env: dict[str, str],
) -> None:
    """StartRun stores the run's answer id with it and reads nothing else (checkpoint.pending);
    each claim of the run (the first, or one taking over after a crash) reads the run's own
    message and the turns before it, so every worker that executes the first step builds the
    same context under the same id, even if the conversation changed in between."""
    from tether_common.auth import Principal
    from tether_common.config import Settings
    from tether_runtime.api import runs as runs_api
    from tether_runtime.engine.agent import context
    from tether_runtime.engine.agents import AgentRegistry
    from tether_runtime.engine.checkpoint import pending_message_id

    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            conv = await conversations.create(conn, "alice", "state")
            question = new_id("msg")  # ids sort by time only to the millisecond: fix the order
            await conversations.add_message(
                conn, conv.id, "user", "earlier question", message_id=question
            )
            await conversations.add_message(
                conn,
                conv.id,
                "assistant",
                "earlier answer",
                message_id=new_id_after("msg", question),
            )
        await asyncio.sleep(0.005)  # the new question's id falls in a later millisecond
        agents = AgentRegistry.load(Settings())
        view, replayed, _ = await runs_api.start_run_once(
            pool, agents, Principal("alice"), conv.id, "restart it", "", "opspilot", {}
        )
        assert not replayed
        async with pool.acquire() as conn:
            # Another answer lands in the conversation after the start.
            await conversations.add_message(conn, conv.id, "assistant", "a later answer")
            run = await runs.get(conn, view.id)
        assert run is not None and run.status == "queued" and run.last_sequence == 1
        answer_id = pending_message_id(run.checkpoint)
        assert answer_id > run.user_message_id  # the answer sorts after the question
        assert "messages" not in run.checkpoint

        budget = context.budget_for(agents.get("opspilot"))
        built = []
        for owner in ("A", "B"):  # B takes the run over once A's lease has run out
            if owner == "B":
                await asyncio.sleep(1.1)
            async with pool.acquire() as conn:
                (claimed,) = await runs.claim_with_conversations(conn, owner, 1, 10)
                assert claimed.run.id == run.id and claimed.took_over == (owner == "B")
                assert claimed.turns is not None and claimed.conversation is not None
                assert [t.content for t in claimed.turns] == [
                    "restart it",
                    "earlier answer",
                    "earlier question",
                ]
                assert claimed.turns[0].id == run.user_message_id
                messages, cut = await context.starting_context(
                    conn,
                    claimed.conversation,
                    conv.id,
                    run.user_message_id,
                    claimed.turns,
                    budget=budget,
                )
                # The same as what the reads of an earlier release built.
                assert (messages, cut) == await context.initial_context(
                    conn, conv.id, run.user_message_id, budget=budget
                )
                built.append(messages)
            assert pending_message_id(claimed.run.checkpoint) == answer_id
        assert built[0] == built[1]
        assert [m["content"] for m in built[0]] == [
            "earlier question",
            "earlier answer",
            "restart it",
        ]
        async with pool.acquire() as conn:
            # A run that has started reads no turns with its claim.
            await conn.execute(
                "UPDATE run SET checkpoint = $2, lease_expires_at = now() - interval '1 hour' "
                "WHERE id = $1",
                run.id,
                {"started": True, "message_id": answer_id, "messages": built[0]},
            )
            (claimed,) = await runs.claim_with_conversations(conn, "C", 30, 10)
            assert claimed.run.id == run.id and claimed.turns is None
    finally:
        await pool.close()


@pytest.fixture
async def writing(private_env: dict[str, str], redis_url: str) -> AsyncIterator[Any]:
    """A pool, a bus and the process-wide sink, as a runtime has them."""
    pool = await create_pool(private_env["DATABASE_URL"], min_size=1, max_size=4)
    bus = EventBus(redis_url)
    await bus.start()
    try:
        yield pool, bus, EventSink(pool, bus)
    finally:
        await bus.close()
        await pool.close()


async def _running(pool: Any, n: int) -> list[RunRow]:
    async with pool.acquire() as conn:
        await _queued_runs(conn, n)
        return [run for run, _ in await runs.claim_batch(conn, "A", 30, n)]


def _deltas(n: int) -> list[ev.RunEvent]:
    return [ev.text_delta("m", f"{i} ") for i in range(n)]


async def test_a_statement_takes_whole_appends_up_to_its_event_limit(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool, bus, sink = writing
    statements: list[list[int]] = []
    real = event_log.append_as_lease_holders

    async def counted(conn: Any, appends: Any) -> dict[str, bool]:
        statements.append([len(a.events) for a in appends])
        return await real(conn, appends)

    monkeypatch.setattr(event_sink.event_log, "append_as_lease_holders", counted)
    big, a, b, c = await _running(pool, 4)
    sizes = {big.id: MAX_STATEMENT_EVENTS + 200, a.id: 300, b.id: 300, c.id: 300}
    appends = [
        event_log.LeaseAppend(r.id, r.lease_epoch, 1, _deltas(sizes[r.id]), 0)
        for r in (big, a, b, c)
    ]
    # All four are queued before the sink's first statement is built.
    assert await asyncio.gather(*(sink.append(x) for x in appends)) == [False] * 4
    # Whole appends, oldest first, until the limit is reached: one larger than it goes alone.
    assert statements == [[MAX_STATEMENT_EVENTS + 200], [300, 300], [300]]
    async with pool.acquire() as conn:
        for run_id, n in sizes.items():
            stored = await event_log.read_after(conn, run_id, 0, 10_000)
            assert [s for s, _ in stored] == list(range(1, n + 2)), run_id


async def test_deltas_queued_ahead_of_a_state_change_go_through_the_shared_statement(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's text deltas commit in the sink's statement, and the state change that ends the
    step in a transaction of its own after them: in order, dense, the state change applied."""
    pool, bus, sink = writing
    (run,) = await _running(pool, 1)
    sink_appends: list[int] = []
    real = sink.append

    async def spied(append: event_log.LeaseAppend) -> bool:
        sink_appends.append(len(append.events))
        return await real(append)

    monkeypatch.setattr(sink, "append", spied)
    writer = RunWriter(pool, bus, sink, run.id, run.lease_epoch, run.last_sequence)
    applied: list[int] = []

    async def apply(conn: Any) -> None:
        # Inside the state change's transaction, after the deltas' own statement committed.
        applied.append(await conn.fetchval("SELECT last_sequence FROM run WHERE id = $1", run.id))

    for delta in _deltas(30):
        await writer.emit([delta], streamed=2)
    await writer.commit([ev.done("m")], apply)
    assert sum(sink_appends) == 30  # every delta went through the sink, none with the done
    assert applied == [32]  # 1 run_started + 30 deltas + done, numbered in the transaction
    assert writer.last_sequence == 32
    async with pool.acquire() as conn:
        stored = await event_log.read_after(conn, run.id, 0, 100)
        row = await conn.fetchrow("SELECT step_streamed FROM run WHERE id = $1", run.id)
    assert [s for s, _ in stored] == list(range(1, 33))
    assert ev.kind_of(ev.RunEvent.FromString(stored[-1][1])) == "done"
    assert row["step_streamed"] == 60


async def test_a_checkpoint_alone_commits_through_the_shared_statement_fenced(
    writing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose only state change is the run's own checkpoint needs no transaction: the
    sink's statement saves it with the events (the deltas counted, then step_streamed reset, the
    token totals taken from it), and a stale lease saves nothing."""
    pool, bus, sink = writing
    (run,) = await _running(pool, 1)
    via_sink: list[tuple[int, str | None, bool]] = []
    real = sink.append

    async def spied(append: event_log.LeaseAppend) -> bool:
        via_sink.append((len(append.events), append.checkpoint, append.reset_streamed))
        return await real(append)

    monkeypatch.setattr(sink, "append", spied)
    writer = RunWriter(pool, bus, sink, run.id, run.lease_epoch, run.last_sequence)
    for delta in _deltas(3):
        await writer.emit([delta], streamed=5)
    cp = '{"v": 1, "steps": 2, "input_tokens": 40, "output_tokens": 7}'
    await writer.commit([], SaveCheckpoint(run.id, run.lease_epoch, cp, True))
    # The shared path, not a transaction; the deltas queued ahead of it go in the same statement.
    assert via_sink == [(3, cp, True)]
    async with pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT checkpoint, step_streamed, input_tokens, output_tokens, last_sequence "
            "FROM run WHERE id = $1",
            run.id,
        )
        assert dict(row) == {
            "checkpoint": {"v": 1, "steps": 2, "input_tokens": 40, "output_tokens": 7},
            "step_streamed": 0,
            "input_tokens": 40,
            "output_tokens": 7,
            "last_sequence": 4,
        }
        # Without a reset the deltas add up; the checkpoint and totals stay as saved.
        await writer.emit(_deltas(1), streamed=3)
        await writer.commit([], SaveCheckpoint(run.id, run.lease_epoch, cp, False))
        streamed = await conn.fetchval("SELECT step_streamed FROM run WHERE id = $1", run.id)
        assert streamed == 3
        # A writer with a stale epoch is fenced: nothing of its checkpoint is saved.
        stale = RunWriter(pool, bus, sink, run.id, run.lease_epoch - 1, 5)
        with pytest.raises(event_log.Fenced):
            await stale.commit([], SaveCheckpoint(run.id, run.lease_epoch - 1, "{}", True))
        kept = await conn.fetchval("SELECT checkpoint FROM run WHERE id = $1", run.id)
        assert kept == {"v": 1, "steps": 2, "input_tokens": 40, "output_tokens": 7}
        # A state change then the checkpoint: its own transaction, the checkpoint saved by the
        # fenced append (no separate statement), the state change applied after it.
        seen: list[Any] = []

        async def change(c: Any) -> None:
            seen.append(await c.fetchval("SELECT checkpoint FROM run WHERE id = $1", run.id))

        newer = '{"v": 1, "steps": 3, "input_tokens": 50, "output_tokens": 9}'
        sink_calls = len(via_sink)
        await writer.commit(
            [ev.text_delta("m", "x")],
            ThenSave(change, SaveCheckpoint(run.id, run.lease_epoch, newer, True)),
        )
        assert len(via_sink) == sink_calls  # not through the shared statement
        assert seen == [{"v": 1, "steps": 3, "input_tokens": 50, "output_tokens": 9}]
        row = await conn.fetchrow(
            "SELECT step_streamed, output_tokens, last_sequence FROM run WHERE id = $1", run.id
        )
        assert dict(row) == {"step_streamed": 0, "output_tokens": 9, "last_sequence": 6}
