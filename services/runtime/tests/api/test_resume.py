"""ResumeRun in invariant 5's order: idempotency, the conditional claim, reject, expiry,
re-authorization, resource reload, cancel. Each test drives a real runtime process over gRPC."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_testkit.client import Client, assert_dense, reason, token, types
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

APPROVE = events_pb2.DECISION_APPROVED
REJECT = events_pb2.DECISION_REJECTED


async def paused(c: Client, db, user_text: str | None = None):
    service, instance = await abnormal_service(db)
    conv = await c.conversation()
    run = (await c.start(conv, user_text or f"restart the abnormal {service} instance")).run
    evs = await c.events(run.id, until="interrupt")
    assert types(evs)[-1] == "interrupt"
    return run.id, evs, instance


async def rpc_reason(coro) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro
    return info.value.code(), reason(info.value)


@pytest.fixture
async def alice(runtime):
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    yield c
    await c.close()


async def test_fifty_concurrent_resumes_execute_once(alice, db):
    run_id, evs, instance = await paused(alice, db)
    interrupt_id = evs[-1].interrupt.interrupt_id
    keys = [uuid.uuid4().hex for _ in range(10)]

    async def attempt(key: str):
        try:
            return key, await alice.resume(run_id, interrupt_id, APPROVE, key), None
        except grpc.aio.AioRpcError as err:
            return key, None, (err.code(), reason(err))

    results = await asyncio.gather(*(attempt(k) for k in keys for _ in range(5)))
    ok = [(k, r) for k, r, e in results if r is not None]
    errors = [(k, e) for k, r, e in results if e is not None]
    winners = {k for k, _ in ok}
    assert len(winners) == 1, f"more than one key won: {winners}"
    winner = winners.pop()
    # Every call with the winning key got the identical answer; exactly one was not a replay.
    answers = [r for k, r in ok if k == winner]
    assert len(answers) == 5
    assert len({a.run.SerializeToString() for a in answers}) == 1
    assert sum(not a.replayed for a in answers) == 1
    # Every other key was told the interrupt is already resolved.
    assert len(errors) == 45
    assert all(
        e == (grpc.StatusCode.FAILED_PRECONDITION, "INTERRUPT_ALREADY_RESOLVED") for _, e in errors
    )
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert types(rest)[-1] == "done"
    assert_dense(evs + rest)
    assert await executions(db, instance) == 1
    print("\n50 resumes: 1 winner, 5 identical answers, 45 INTERRUPT_ALREADY_RESOLVED")


async def test_same_key_other_body_is_reused(alice, db):
    run_id, evs, _ = await paused(alice, db)
    key = uuid.uuid4().hex
    await alice.resume(run_id, evs[-1].interrupt.interrupt_id, REJECT, key)
    code, why = await rpc_reason(alice.resume(run_id, evs[-1].interrupt.interrupt_id, APPROVE, key))
    assert (code, why) == (grpc.StatusCode.ALREADY_EXISTS, "IDEMPOTENCY_KEY_REUSED")


async def test_reject_changes_status_only(alice, db):
    run_id, evs, instance = await paused(alice, db)
    await alice.resume(run_id, evs[-1].interrupt.interrupt_id, REJECT)
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert "tool_started" not in types(rest)
    assert rest[0].interrupt_resolved.decision == REJECT
    assert types(rest)[-1] == "done"
    assert await executions(db, instance) == 0
    assert (
        await db.fetchval("SELECT status FROM inv_instance WHERE id = $1", instance) == "abnormal"
    )
    text = "".join(e.text_delta.delta for e in rest if e.WhichOneof("event") == "text_delta")
    assert "did not touch" in text


async def test_expired_interrupt(alice, db):
    """A note left overnight: the expiry lies far in the past, no fake clock."""
    run_id, evs, instance = await paused(alice, db)
    interrupt_id = evs[-1].interrupt.interrupt_id
    await db.execute(
        "UPDATE interrupt SET expires_at = now() - interval '30 days' WHERE id = $1", interrupt_id
    )
    code, why = await rpc_reason(alice.resume(run_id, interrupt_id, APPROVE))
    assert (code, why) == (grpc.StatusCode.FAILED_PRECONDITION, "INTERRUPT_EXPIRED")
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert rest[0].interrupt_resolved.decision == events_pb2.DECISION_EXPIRED
    assert types(rest)[-1] == "done" and "tool_started" not in types(rest)
    assert await executions(db, instance) == 0
    # Asking again is still "expired", never a restart.
    code, why = await rpc_reason(alice.resume(run_id, interrupt_id, APPROVE))
    assert why == "INTERRUPT_EXPIRED"


async def test_far_future_expiry_is_honoured(alice, db):
    run_id, evs, instance = await paused(alice, db)
    interrupt_id = evs[-1].interrupt.interrupt_id
    await db.execute(
        "UPDATE interrupt SET expires_at = now() + interval '3650 days' WHERE id = $1", interrupt_id
    )
    await alice.resume(run_id, interrupt_id, APPROVE)
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert types(rest)[-1] == "done"
    assert await executions(db, instance) == 1


async def test_permission_revoked_before_resume(runtime, db):
    await db.execute(
        "INSERT INTO \"grant\" VALUES ('carol', 'instance.restart', '*') ON CONFLICT DO NOTHING"
    )
    carol = Client(runtime.addr, token(TEST_SECRET, "carol"))
    run_id, evs, instance = await paused(carol, db)
    await db.execute("DELETE FROM \"grant\" WHERE user_id = 'carol'")
    code, why = await rpc_reason(carol.resume(run_id, evs[-1].interrupt.interrupt_id, APPROVE))
    assert (code, why) == (grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED")
    # Nothing changed: the interrupt still waits, and rejecting is still possible.
    run = await db.fetchrow("SELECT status, last_sequence FROM run WHERE id = $1", run_id)
    assert run["status"] == "interrupted" and run["last_sequence"] == evs[-1].sequence
    await carol.resume(run_id, evs[-1].interrupt.interrupt_id, REJECT)
    assert types(await carol.events(run_id, after=evs[-1].sequence))[-1] == "done"
    assert await executions(db, instance) == 0
    await carol.close()


async def test_reader_without_grant_gets_no_interrupt(runtime, db):
    service, instance = await abnormal_service(db)
    dave = Client(runtime.addr, token(TEST_SECRET, "dave"))
    conv = await dave.conversation()
    run = (await dave.start(conv, f"restart the abnormal {service} instance")).run
    evs = await dave.events(run.id)
    assert "interrupt" not in types(evs) and types(evs)[-1] == "done"
    text = "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")
    assert "not allowed" in text
    await dave.close()


async def test_instance_already_healthy_at_resume(alice, db):
    run_id, evs, instance = await paused(alice, db)
    await db.execute("UPDATE inv_instance SET status = 'healthy' WHERE id = $1", instance)
    await alice.resume(run_id, evs[-1].interrupt.interrupt_id, APPROVE)
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert "tool_started" not in types(rest) and types(rest)[-1] == "done"
    text = "".join(e.text_delta.delta for e in rest if e.WhichOneof("event") == "text_delta")
    assert "is healthy now" in text and "did not act" in text
    assert await executions(db, instance) == 0


async def test_cancel_then_resume(alice, db):
    run_id, evs, instance = await paused(alice, db)
    resp = await alice.stub.CancelRun(
        __import__("tether.runtime.v1.runtime_service_pb2", fromlist=["x"]).CancelRunRequest(
            run_id=run_id, reason="changed my mind"
        ),
        metadata=alice.md,
        timeout=10,
    )
    assert resp.run.status == resources_pb2.RUN_STATUS_CANCELLED
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert types(rest) == ["interrupt_resolved", "cancelled"]
    assert rest[0].interrupt_resolved.decision == events_pb2.DECISION_CANCELLED
    code, why = await rpc_reason(alice.resume(run_id, evs[-1].interrupt.interrupt_id, APPROVE))
    assert why == "INTERRUPT_ALREADY_RESOLVED"
    assert await executions(db, instance) == 0


async def test_cancel_a_running_run(alice, db):
    conv = await alice.conversation()
    run = (await alice.start(conv, "stream 3000 deltas")).run
    from tether.runtime.v1 import runtime_service_pb2 as pb

    await alice.events(run.id, until="text_delta")
    await alice.stub.CancelRun(pb.CancelRunRequest(run_id=run.id), metadata=alice.md, timeout=10)
    evs = await alice.events(run.id)
    assert types(evs)[-1] == "cancelled"
    assert_dense(evs)


async def test_another_users_run_is_not_found(alice, runtime, db):
    run_id, evs, instance = await paused(alice, db)
    bob = Client(runtime.addr, token(TEST_SECRET, "bob"))
    code, why = await rpc_reason(bob.resume(run_id, evs[-1].interrupt.interrupt_id, APPROVE))
    assert (code, why) == (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")
    code, why = await rpc_reason(bob.events(run_id))
    assert code == grpc.StatusCode.NOT_FOUND
    await bob.close()
    assert await executions(db, instance) == 0


async def test_bad_tokens_are_unauthenticated(runtime):
    import jwt

    for bad in [
        "",
        "garbage",
        token("another-secret-another-secret-another", "alice"),
        token(TEST_SECRET, "alice", ttl_s=-120),  # beyond the clock leeway
        jwt.encode({"sub": "alice", "exp": 9999999999}, key="", algorithm="none"),
    ]:
        c = Client(runtime.addr, bad)
        code, _ = await rpc_reason(c.conversation())
        assert code == grpc.StatusCode.UNAUTHENTICATED, bad
        await c.close()


async def test_start_run_idempotency(alice):
    conv = await alice.conversation()
    key = uuid.uuid4().hex
    a = await alice.start(conv, "show recent errors of payment-api", key)
    b = await alice.start(conv, "show recent errors of payment-api", key)
    assert a.run.id == b.run.id and b.replayed and not a.replayed
    code, why = await rpc_reason(alice.start(conv, "something else", key))
    assert why == "IDEMPOTENCY_KEY_REUSED"


async def test_stream_reset_for_a_point_ahead(alice):
    conv = await alice.conversation()
    run = (await alice.start(conv, "show recent errors of payment-api")).run
    evs = await alice.events(run.id)
    ahead = await alice.events(run.id, after=evs[-1].sequence + 50)
    assert types(ahead) == ["reset"]
    assert ahead[0].reset.run.last_sequence == evs[-1].sequence


async def test_value_json_answers_only_a_graphs_interrupt(alice, db):
    """A native card has no graph value to resume: an exact value (ResumeRunRequest.value_json)
    is INVALID_ANSWER and changes nothing; the card is still approved as usual."""
    from tether.runtime.v1 import runtime_service_pb2 as pb

    run_id, evs, instance = await paused(alice, db)
    assert not evs[-1].interrupt.payload.value_json  # a native card carries no graph value
    request = pb.ResumeRunRequest(
        run_id=run_id,
        interrupt_id=evs[-1].interrupt.interrupt_id,
        decision=events_pb2.DECISION_RESPONDED,
        value_json='{"x": 1}',
        idempotency_key=uuid.uuid4().hex,
    )
    code, why = await rpc_reason(alice.stub.ResumeRun(request, metadata=alice.md, timeout=10))
    assert (code, why) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ANSWER")
    await alice.resume(run_id, evs[-1].interrupt.interrupt_id, APPROVE)
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert types(rest)[-1] == "done"
    assert await executions(db, instance) == 1
