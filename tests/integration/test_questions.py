"""Every question an agent can ask (DESIGN section 10, seed 000): OpsPilot asks which of two
abnormal instances to restart (select_option) and how many replicas to scale to (provide_input),
pauses, and continues the same run from its checkpoint on another runtime once a person answers.
An answer that does not fit its question is refused (INVALID_ANSWER) and changes nothing."""

from __future__ import annotations

import hashlib
import json

import asyncpg
import grpc
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, assert_dense, reason, token, types
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.timeout(120)


async def _answer(c: Client, run_id: str, interrupt_id: str, text: str) -> pb.ResumeRunResponse:
    return await c.stub.ResumeRun(
        pb.ResumeRunRequest(
            run_id=run_id,
            interrupt_id=interrupt_id,
            decision=events_pb2.DECISION_RESPONDED,
            input=text,
            # One key per answer, within the 128 characters a key may have whatever the answer.
            idempotency_key=f"k-{run_id}-{hashlib.sha256(text.encode()).hexdigest()[:32]}",
        ),
        metadata=c.md,
        timeout=10,
    )


async def _refused(c: Client, db: asyncpg.Connection, run_id: str, interrupt_id: str, text: str):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await _answer(c, run_id, interrupt_id, text)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert reason(err.value) == "INVALID_ANSWER"
    row = await db.fetchrow("SELECT status, input FROM interrupt WHERE id = $1", interrupt_id)
    assert (row["status"], row["input"]) == ("pending", None), "a refused answer changed nothing"
    assert await db.fetchval("SELECT status FROM run WHERE id = $1", run_id) == "interrupted"
    return err.value.details()


async def _paused_on_a_then_b(
    private_env: dict[str, str], procs: list[Proc], text: str, db: asyncpg.Connection
) -> tuple[Client, str, events_pb2.RunEvent]:
    a = start_runtime(private_env, name="runtime-questions-a")
    procs.append(a)
    ca = Client(a.addr, token(TEST_SECRET, "alice"))
    conv = await ca.conversation()
    run = (await ca.start(conv, text)).run
    evs = await ca.events(run.id, until="interrupt")
    await ca.close()
    a.terminate()  # the run waits in Postgres; the answer lands on another runtime
    b = start_runtime(private_env, name="runtime-questions-b")
    procs.append(b)
    return Client(b.addr, token(TEST_SECRET, "alice")), run.id, evs[-1]


async def test_select_which_abnormal_instance_then_restart_it_on_another_runtime(
    private_env, private_db, procs
):
    db = private_db
    service, first = await abnormal_service(db)
    second = f"{service}-2"
    await db.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        second,
        service,
    )
    c, run_id, asked = await _paused_on_a_then_b(
        private_env, procs, f"restart the abnormal {service} instance", db
    )
    try:
        raised = asked.interrupt
        assert raised.kind == resources_pb2.INTERRUPT_KIND_SELECT_OPTION
        assert [o.value for o in raised.payload.options] == [first, second]
        assert "Which one" in raised.payload.details
        message = await _refused(c, db, run_id, raised.interrupt_id, "not-an-instance")
        assert first in message and second in message
        # A confirmation's answer does not fit a question either.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.resume(run_id, raised.interrupt_id, events_pb2.DECISION_APPROVED)
        assert reason(err.value) == "INVALID_ANSWER"
        await _answer(c, run_id, raised.interrupt_id, second)
        rest = await c.events(run_id, after=asked.sequence, until="interrupt")
        assert types(rest) == ["interrupt_resolved", "interrupt"]
        card = rest[-1].interrupt
        assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
        assert card.payload.target.startswith(f"instance {second}")
        # A confirmation takes approve or reject only: an outcome_unknown answer or a
        # question's answer is refused, and the card still waits.
        for wrong in (events_pb2.DECISION_RETRY, events_pb2.DECISION_RESPONDED):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await c.resume(run_id, card.interrupt_id, wrong)
            assert reason(err.value) == "INVALID_ANSWER"
        status = await db.fetchval("SELECT status FROM interrupt WHERE id = $1", card.interrupt_id)
        assert status == "pending"
        await c.resume(run_id, card.interrupt_id)
        end = await c.events(run_id, after=rest[-1].sequence)
        assert types(end)[-1] == "done"
        every = await c.events(run_id)
        assert_dense(every)
        statuses = dict(
            await db.fetch("SELECT id, status FROM inv_instance WHERE service = $1", service)
        )
        assert statuses == {first: "abnormal", second: "healthy"}
        answer = await db.fetchval(
            "SELECT result FROM tool_call WHERE run_id = $1 AND tool = 'select_option'", run_id
        )
        assert json.loads(answer)["data"] == {"option": second}
    finally:
        await c.close()


async def test_provide_the_missing_replica_count_then_scale_on_another_runtime(
    private_env, private_db, procs
):
    db = private_db
    service, _ = await abnormal_service(db)
    c, run_id, asked = await _paused_on_a_then_b(private_env, procs, f"scale {service}", db)
    try:
        raised = asked.interrupt
        assert raised.kind == resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT
        schema = json.loads(raised.payload.input_schema_json)
        assert schema["required"] == ["replicas"]
        for bad in (
            "",
            "7",
            '{"replicas": "seven"}',
            '{"replicas": 99}',
            '{"count": 3}',
            # Not JSON to a bounded parser (a RecursionError and a ValueError before: INTERNAL).
            "[" * 100_000,
            '{"replicas": ' + "4" * 5000 + "}",
            '{"replicas": 4, "note": NaN}',
        ):
            await _refused(c, db, run_id, raised.interrupt_id, bad)
        await _answer(c, run_id, raised.interrupt_id, '{"replicas": 4}')
        rest = await c.events(run_id, after=asked.sequence, until="interrupt")
        card = rest[-1].interrupt
        assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
        assert card.payload.tool == "scale_service"
        assert "replicas=4" in card.payload.parameter_summary
        await c.resume(run_id, card.interrupt_id)
        end = await c.events(run_id, after=rest[-1].sequence)
        assert types(end)[-1] == "done"
        assert_dense(await c.events(run_id))
        replicas = await db.fetchval(
            "SELECT replicas FROM inv_service WHERE name = $1 AND env = 'prod'", service
        )
        assert replicas == 4
    finally:
        await c.close()
