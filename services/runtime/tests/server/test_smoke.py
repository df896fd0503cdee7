"""The demo's headline flow over gRPC: stream to the interrupt, approve, stream to done."""

import pytest
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


async def test_restart_the_abnormal_payment_api_instance(runtime, db):
    await db.execute("UPDATE inv_instance SET status = 'abnormal' WHERE id = 'payment-api-2'")
    before = await executions(db, "payment-api-2")
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    conv = await c.conversation()
    run = (await c.start(conv, "restart the abnormal payment-api instance")).run
    first = await c.events(run.id, until="interrupt")
    assert types(first) == ["run_started", "tool_started", "tool_finished", "interrupt"]
    intr = first[-1].interrupt
    assert intr.payload.target == "instance payment-api-2 (payment-api/prod)"
    assert intr.payload.title == "Restart instance"
    assert intr.payload.risk == "high"
    await c.resume(run.id, intr.interrupt_id)
    rest = await c.events(run.id, after=first[-1].sequence)
    assert types(rest)[:3] == ["interrupt_resolved", "tool_started", "tool_finished"]
    assert types(rest)[-1] == "done"
    assert_dense(first + rest)
    # The whole log replayed from 0 is the same list, once.
    assert [e.sequence for e in await c.events(run.id)] == [e.sequence for e in first + rest]
    assert await executions(db, "payment-api-2") == before + 1
    status = await db.fetchval("SELECT status FROM inv_instance WHERE id = 'payment-api-2'")
    assert status == "healthy"
    await c.close()


async def test_it_follows_the_conversation(runtime, db):
    """ "its logs" resolves through the confirmed facts of the earlier turn."""
    service, instance = await abnormal_service(db)
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    conv = await c.conversation()
    run = (await c.start(conv, f"find the abnormal {service} instance")).run
    await c.events(run.id)
    run2 = (await c.start(conv, "now show me its logs")).run
    evs = await c.events(run2.id)
    started = [e.tool_started for e in evs if e.WhichOneof("event") == "tool_started"]
    assert [s.tool for s in started] == ["get_logs"]
    assert instance in started[0].args_summary
    await c.close()


async def test_concurrent_runs_in_one_conversation_each_answer_their_own_message(runtime):
    """Newer messages of other runs must not push a run's own message out of its context."""
    import asyncio

    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    conv = await c.conversation()
    runs = [(await c.start(conv, f"stream {n} deltas")).run for n in range(3, 23)]
    results = await asyncio.gather(*(c.events(r.id) for r in runs))
    for n, evs in zip(range(3, 23), results, strict=True):
        assert types(evs)[-1] == "done", types(evs)
        text = "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")
        assert text == "".join(f"t{i} " for i in range(n))
    await c.close()
