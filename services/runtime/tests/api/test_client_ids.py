"""The caller's own ids (issue 32: AG-UI's client names its threads and runs): a conversation
found again by its client id, a run and each resumed stretch found by theirs, an id that names
one thing for good (CLIENT_ID_TAKEN, refused before anything changes), per user, and gone with
the conversation."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, reason, token, types
from tether_testkit.inventory import abnormal_service
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


@pytest.fixture
async def alice(runtime):
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    yield c
    await c.close()


async def _conv(c: Client, client_id: str) -> pb.CreateConversationResponse:
    return await c.stub.CreateConversation(
        pb.CreateConversationRequest(title="ag-ui", client_id=client_id), metadata=c.md, timeout=10
    )


async def _refused(coro) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro
    return info.value.code(), reason(info.value)


async def test_a_client_id_names_one_conversation_per_user_even_when_raced(runtime, alice, db):
    thread = str(uuid.uuid4())
    made = await asyncio.gather(*(_conv(alice, thread) for _ in range(6)))
    assert len({m.conversation.id for m in made}) == 1
    assert sum(not m.existed for m in made) == 1
    # The losers' conversations were undone: one conversation of alice's holds the id.
    n = await db.fetchval(
        "SELECT count(*) FROM conversation c JOIN client_ref r ON r.conversation_id = c.id "
        "WHERE r.client_id = $1",
        thread,
    )
    assert n == 1
    bob = Client(runtime.addr, token(TEST_SECRET, "bob"))
    try:
        theirs = await _conv(bob, thread)  # the same id is bob's own, another conversation
        assert not theirs.existed and theirs.conversation.id != made[0].conversation.id
    finally:
        await bob.close()
    got = await alice.stub.GetConversation(
        pb.GetConversationRequest(client_id=thread), metadata=alice.md, timeout=10
    )
    assert got.conversation.id == made[0].conversation.id
    code, why = await _refused(
        alice.stub.GetConversation(
            pb.GetConversationRequest(client_id="unknown"), metadata=alice.md, timeout=10
        )
    )
    assert (code, why) == (grpc.StatusCode.NOT_FOUND, "CONVERSATION_NOT_FOUND")
    plain = await _conv(alice, "")  # no id: an ordinary new conversation each time
    assert not plain.existed and plain.conversation.id != made[0].conversation.id
    code, why = await _refused(_conv(alice, "x" * 129))
    assert (code, why) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")


async def test_runs_and_resumed_stretches_are_found_by_their_client_ids(alice, db):
    service, _ = await abnormal_service(db, prefix="cid")
    thread = str(uuid.uuid4())
    conv = (await _conv(alice, thread)).conversation.id
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    start = pb.StartRunRequest(
        conversation_id=conv,
        text=f"restart the abnormal {service} instance",
        idempotency_key=f"k-{first}",
        client_run_id=first,
    )
    run = (await alice.stub.StartRun(start, metadata=alice.md, timeout=10)).run
    again = await alice.stub.StartRun(start, metadata=alice.md, timeout=10)
    assert again.replayed and again.run.id == run.id
    evs = await alice.events(run.id, until="interrupt")
    interrupt_id = evs[-1].interrupt.interrupt_id

    found = await alice.stub.GetRun(
        pb.GetRunRequest(client_run_id=first), metadata=alice.md, timeout=10
    )
    assert found.run.id == run.id and found.answered_interrupt_id == ""
    assert found.client_conversation_id == thread

    # A start that reuses the id on another conversation is refused and starts nothing.
    other = (await _conv(alice, str(uuid.uuid4()))).conversation.id
    before = await db.fetchval("SELECT count(*) FROM run WHERE user_id = 'alice'")
    code, why = await _refused(
        alice.stub.StartRun(
            pb.StartRunRequest(conversation_id=other, text="hi", client_run_id=first),
            metadata=alice.md,
            timeout=10,
        )
    )
    assert (code, why) == (grpc.StatusCode.ALREADY_EXISTS, "CLIENT_ID_TAKEN")
    assert await db.fetchval("SELECT count(*) FROM run WHERE user_id = 'alice'") == before

    # An answer that would take the start's id is refused before the answer is looked at.
    resume = pb.ResumeRunRequest(
        run_id=run.id,
        interrupt_id=interrupt_id,
        decision=events_pb2.DECISION_APPROVED,
        idempotency_key=f"r-{second}",
        client_run_id=first,
    )
    code, why = await _refused(alice.stub.ResumeRun(resume, metadata=alice.md, timeout=10))
    assert (code, why) == (grpc.StatusCode.ALREADY_EXISTS, "CLIENT_ID_TAKEN")
    assert await db.fetchval("SELECT status FROM interrupt WHERE id = $1", interrupt_id) == (
        "pending"
    )

    resume.client_run_id = second
    resumed = await alice.stub.ResumeRun(resume, metadata=alice.md, timeout=10)
    twice = await alice.stub.ResumeRun(resume, metadata=alice.md, timeout=10)
    assert twice.replayed and twice.run.id == resumed.run.id == run.id
    found = await alice.stub.GetRun(
        pb.GetRunRequest(client_run_id=second), metadata=alice.md, timeout=10
    )
    assert found.run.id == run.id and found.answered_interrupt_id == interrupt_id
    assert types(await alice.events(run.id))[-1] == "done"

    code, why = await _refused(
        alice.stub.GetRun(pb.GetRunRequest(client_run_id="nobody"), metadata=alice.md, timeout=10)
    )
    assert (code, why) == (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")

    # Deleting the conversation takes its ids with it.
    await alice.stub.DeleteConversation(
        pb.DeleteConversationRequest(conversation_id=conv), metadata=alice.md, timeout=10
    )
    assert (
        await db.fetchval("SELECT count(*) FROM client_ref WHERE conversation_id = $1", conv) == 0
    )
