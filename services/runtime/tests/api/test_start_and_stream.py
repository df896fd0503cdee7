"""StartRunAndStreamEvents: one call that starts a run and streams it from its first event."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, assert_dense, reason, token, types
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


async def test_the_first_message_carries_the_run_and_every_event_follows(runtime, db) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        first, evs = await c.start_streaming(conv, "stream 50 deltas")
        run = first.run
        assert run.id.startswith("run_") and run.conversation_id == conv
        assert not first.replayed
        assert types(evs)[0] == "run_started" and types(evs)[-1] == "done"
        text = "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")
        assert text == "".join(f"t{i} " for i in range(50))
        assert_dense(evs)
        assert all(e.run_id == run.id for e in evs)
        # The same log as a stream opened afterwards reads.
        assert [e.SerializeToString() for e in await c.events(run.id)] == [
            e.SerializeToString() for e in evs
        ]
        stored = await db.fetchval("SELECT status FROM run WHERE id = $1", run.id)
        assert stored == "completed"
    finally:
        await c.close()


async def test_a_repeated_key_streams_the_first_run_and_starts_no_other(runtime, db) -> None:
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        key = "same-start-key"
        (a, a_evs), (b, b_evs) = await asyncio.gather(
            c.start_streaming(conv, "stream 5 deltas", key),
            c.start_streaming(conv, "stream 5 deltas", key),
        )
        assert a.run.id == b.run.id
        assert sorted([a.replayed, b.replayed]) == [False, True]
        for evs in (a_evs, b_evs):
            assert types(evs)[0] == "run_started" and types(evs)[-1] == "done"
            assert_dense(evs)
        n = await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv)
        assert n == 1
        # The same key with another text is refused, and starts nothing.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.start_streaming(conv, "stream 6 deltas", key)
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert reason(err.value) == "IDEMPOTENCY_KEY_REUSED"
        n = await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv)
        assert n == 1
    finally:
        await c.close()


@pytest.mark.parametrize(
    ("text", "user", "code"),
    [
        ("   ", "alice", grpc.StatusCode.INVALID_ARGUMENT),
        ("x" * 8001, "alice", grpc.StatusCode.INVALID_ARGUMENT),
        ("stream 3 deltas", "mallory", grpc.StatusCode.NOT_FOUND),
    ],
    ids=["blank", "too-long", "another-users-conversation"],
)
async def test_a_refused_start_streams_nothing_and_stores_nothing(
    runtime, db, text: str, user: str, code: grpc.StatusCode
) -> None:
    owner = Client(runtime.addr, token(TEST_SECRET, "alice"))
    caller = Client(runtime.addr, token(TEST_SECRET, user))
    try:
        conv = await owner.conversation()
        call = caller.stub.StartRunAndStreamEvents(
            pb.StartRunAndStreamEventsRequest(conversation_id=conv, text=text),
            metadata=caller.md,
            timeout=10,
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in call:
                pytest.fail("a refused start sent a message")
        assert err.value.code() == code
        assert await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 0
        n = await db.fetchval("SELECT count(*) FROM message WHERE conversation_id = $1", conv)
        assert n == 0
    finally:
        await owner.close()
        await caller.close()


async def test_a_caller_that_leaves_early_resumes_with_stream_run_events(runtime) -> None:
    """The run goes on without its first stream; the caller picks it up after what it saw."""
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await c.conversation()
        call = c.stub.StartRunAndStreamEvents(
            pb.StartRunAndStreamEventsRequest(conversation_id=conv, text="stream 200 deltas"),
            metadata=c.md,
            timeout=30,
        )
        first = await call.read()
        run_id = first.run.id
        seen = list(first.events)
        call.cancel()
        rest = await c.events(run_id, after=seen[-1].sequence)
        assert_dense(seen + rest)
        assert types(rest)[-1] == "done"
    finally:
        await c.close()
