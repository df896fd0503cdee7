"""ListRuns: the caller's runs newest first, narrowed by conversation and status, paged, each
interrupted one with its pending interrupt; nobody else's runs, and no other user's conversation."""

from __future__ import annotations

import uuid

import grpc
import pytest
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, reason, token, types
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


@pytest.fixture
async def user(runtime):
    c = Client(runtime.addr, token(TEST_SECRET, f"lister-{uuid.uuid4().hex[:8]}"))
    yield c
    await c.close()


async def _list(c: Client, **fields: object) -> pb.ListRunsResponse:
    return await c.stub.ListRuns(pb.ListRunsRequest(**fields), metadata=c.md, timeout=10)


async def test_lists_own_runs_newest_first_by_conversation_status_and_page(user, runtime):
    conv_a, conv_b = await user.conversation("a"), await user.conversation("b")
    done = []
    for n in (3, 4):
        run = (await user.start(conv_a, f"stream {n} deltas")).run
        assert types(await user.events(run.id))[-1] == "done"
        done.append(run.id)
    asking = (await user.start(conv_b, "scale payment-api")).run
    assert types(await user.events(asking.id, until="interrupt"))[-1] == "interrupt"

    everything = await _list(user)
    assert [r.id for r in everything.runs] == [asking.id, *reversed(done)]
    assert everything.next_page_token == ""

    by_conv = await _list(user, conversation_id=conv_a)
    assert [r.id for r in by_conv.runs] == list(reversed(done))
    assert {r.status for r in by_conv.runs} == {resources_pb2.RUN_STATUS_COMPLETED}
    assert all(r.usage.model_steps >= 1 and r.usage.output_tokens > 0 for r in by_conv.runs)
    assert not any(r.HasField("pending_interrupt") for r in by_conv.runs)

    waiting = await _list(user, status=resources_pb2.RUN_STATUS_INTERRUPTED)
    (w,) = waiting.runs
    assert w.id == asking.id
    assert w.pending_interrupt.kind == resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT
    assert w.pending_interrupt.status == resources_pb2.INTERRUPT_STATUS_PENDING

    first = await _list(user, page_size=2)
    assert [r.id for r in first.runs] == [asking.id, done[1]]
    second = await _list(user, page_size=2, page_token=first.next_page_token)
    assert [r.id for r in second.runs] == [done[0]]
    assert second.next_page_token == ""

    other = Client(runtime.addr, token(TEST_SECRET, f"other-{uuid.uuid4().hex[:8]}"))
    try:
        assert list((await _list(other)).runs) == []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _list(other, conversation_id=conv_a)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert reason(info.value) == "CONVERSATION_NOT_FOUND"
    finally:
        await other.close()


async def test_an_unknown_status_is_invalid(user):
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _list(user, status=99)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
