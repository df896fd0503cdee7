"""StartRun with the caller's own run id (StartRunRequest.run_id): a caller subscribed to the run's
channel before it called gets the first event in the answer and every later one on the bus, the
same log a stream reads afterwards; an id not made as run ids are, or one some run has, changes
nothing and says why (a taken id fails only its own start, not the others of its batch)."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_common.event_batch import split_batch
from tether_common.ids import _encode, new_id
from tether_common.run_bus import EventBus
from tether_testkit.client import Client, assert_dense, reason, token, types
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


def _start(conv: str, text: str, run_id: str, key: str = "") -> pb.StartRunRequest:
    return pb.StartRunRequest(conversation_id=conv, text=text, run_id=run_id, idempotency_key=key)


async def test_a_named_run_is_followed_on_the_bus_from_the_answer_on(
    runtime, db, redis_url: str
) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    bus = EventBus(redis_url)
    await bus.start()
    try:
        conv = await c.conversation()
        run_id = new_id("run")
        with bus.subscribe(run_id) as sub:
            async with asyncio.timeout(10):
                while not await bus.confirmed(sub):
                    await asyncio.sleep(0.05)
            resp = await c.stub.StartRun(
                _start(conv, "stream 20 deltas", run_id), metadata=c.md, timeout=10
            )
            assert resp.run.id == run_id and not resp.replayed
            assert [(e.sequence, e.WhichOneof("event")) for e in resp.events] == [
                (1, "run_started")
            ]
            evs = list(resp.events)
            async with asyncio.timeout(30):
                while types(evs)[-1] != "done":
                    evs.extend(split_batch(await sub.queue.get()))
        assert not sub.overflowed
        assert_dense(evs)
        stored = await c.events(run_id)
        assert [e.SerializeToString() for e in stored] == [e.SerializeToString() for e in evs]
    finally:
        await bus.close()
        await c.close()


def _made(seconds_from_now: float) -> str:
    millis = int((time.time() + seconds_from_now) * 1000)
    return f"run_{_encode(millis, 10)}{'0' * 16}"


@pytest.mark.parametrize(
    "run_id",
    [
        "run_abc",
        new_id("conv").replace("conv_", "conf_"),
        new_id("run").upper().replace("RUN_", "run_"),
        new_id("run") + "0",
        _made(-3600),  # an hour old: it would sort among runs made then
        _made(+3600),
    ],
    ids=["short", "other-prefix", "upper-case", "too-long", "an-hour-old", "an-hour-ahead"],
)
async def test_an_id_not_made_as_run_ids_are_is_refused_and_stores_nothing(
    runtime, db, run_id: str
) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.stub.StartRun(_start(conv, "hi", run_id), metadata=c.md, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "run_id" in (err.value.details() or "")
        assert await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 0
    finally:
        await c.close()


async def test_a_taken_id_fails_its_own_start_only(runtime, db) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        convs = [await c.conversation() for _ in range(5)]
        taken = (await c.start(convs[0], "hi")).run.id
        # Five starts at once (no key: one batch of admissions, as the runtime forms them); the
        # one that names a taken id fails alone.
        results = await asyncio.gather(
            *(
                c.stub.StartRun(
                    _start(conv, "hi", taken if i == 2 else new_id("run")),
                    metadata=c.md,
                    timeout=10,
                )
                for i, conv in enumerate(convs)
            ),
            return_exceptions=True,
        )
        err = results[2]
        assert isinstance(err, grpc.aio.AioRpcError), err
        assert err.code() == grpc.StatusCode.ALREADY_EXISTS
        assert reason(err) == "CLIENT_ID_TAKEN"
        assert all(isinstance(r, pb.StartRunResponse) for i, r in enumerate(results) if i != 2)
        counts = [
            await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv)
            for conv in convs
        ]
        assert counts == [2, 1, 0, 1, 1]
        # The run that had the id is untouched: its conversation, its first event.
        row = await db.fetchrow("SELECT conversation_id FROM run WHERE id = $1", taken)
        assert row["conversation_id"] == convs[0]
    finally:
        await c.close()


async def test_a_replayed_start_answers_the_earlier_run_without_events(runtime, db) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        first = await c.stub.StartRun(
            _start(conv, "hi", new_id("run"), "key-1"), metadata=c.md, timeout=10
        )
        assert len(first.events) == 1 and not first.replayed
        again = await c.stub.StartRun(
            _start(conv, "hi", new_id("run"), "key-1"), metadata=c.md, timeout=10
        )
        assert again.replayed and again.run.id == first.run.id and not again.events
        # A start without run_id answers as it always did: no events.
        plain = await c.start(conv, "hi again")
        assert not plain.events
    finally:
        await c.close()
