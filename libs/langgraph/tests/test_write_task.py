"""A LangGraph `@task` whose side effect is marked `write_task`, on a real runtime process: run
once per call whatever LangGraph re-runs, with an idempotency key; killed inside the call, a
person decides (outcome_unknown) instead of the task running again. The graph is the functional
API's `@entrypoint`, loaded without a wrapper."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import start_runtime
from tether_testkit.secrets import TEST_SECRET

STARTUP_S = 90

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(180)]

GRAPH = """
import asyncio
import os

from langgraph.func import entrypoint, task
from langgraph.types import interrupt
from tether_langgraph import idempotency_key, write_task


@task
@write_task(action="ticket.file", scope="tickets/{queue}")
async def file_ticket(queue: str, note: str) -> str:
    with open(os.environ["LGTASK_LEDGER"], "a") as f:
        f.write(f"{queue}|{note}|{idempotency_key()}\\n")
    await asyncio.sleep(float(os.environ.get("LGTASK_PAUSE_S") or 0))  # inside the call
    return f"filed {note}"


@entrypoint()
async def filer(request: dict) -> dict:
    first = await file_ticket("ops", request["note"])
    again = interrupt({"kind": "confirm_action", "title": "File a second ticket?"})
    second = await file_ticket("ops", request["note"] + "-2") if again else "skipped"
    return {"first": first, "second": second}
"""


@pytest.fixture
async def dsn(admin_dsn: str) -> AsyncIterator[str]:
    import asyncpg
    from tether_runtime.store import grants

    dsn = await stores.create_fresh_database(admin_dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", "ticket.file", "tickets/*")
    finally:
        await conn.close()
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


def task_env(tmp: Path, base_env: dict[str, str], dsn: str) -> tuple[dict[str, str], Path]:
    write_package(tmp, "lgtask_graph", GRAPH)
    ledger = tmp / "ledger.txt"
    env = {
        **base_env,
        "DATABASE_URL": dsn,
        "TETHER_AGENTS": "lgtask_graph:filer",
        "LGTASK_LEDGER": str(ledger),
    }
    return env_with_path(env, tmp), ledger


async def start(c: Client, note: str) -> Any:
    request = pb.StartRunRequest(
        conversation_id=await c.conversation(), agent="filer", input_json=json.dumps({"note": note})
    )
    return (await c.stub.StartRun(request, metadata=c.md, timeout=10)).run


async def decide(c: Client, run_id: str, intr: Any, decision: int) -> None:
    await c.stub.ResumeRun(
        pb.ResumeRunRequest(
            run_id=run_id,
            interrupt_id=intr.interrupt_id,
            decision=decision,
            idempotency_key=uuid.uuid4().hex,
        ),
        metadata=c.md,
        timeout=10,
    )


async def test_each_write_task_call_runs_once_with_its_key(
    tmp_path: Path, base_env: dict[str, str], dsn: str, procs: list[Any]
) -> None:
    env, ledger = task_env(tmp_path, base_env, dsn)
    proc = start_runtime(env, name="runtime-lgtask", timeout=STARTUP_S)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        run = await start(c, "disk")
        evs = await c.events(run.id, until="interrupt")
        await decide(c, run.id, evs[-1].interrupt, events_pb2.DECISION_APPROVED)
        evs += await c.events(run.id, after=evs[-1].sequence)
        assert types(evs)[-1] == "done", types(evs)
        assert_dense(evs)
        final = json.loads(evs[-1].done.output_json)
        assert final == {"first": "filed disk", "second": "filed disk-2"}
        lines = ledger.read_text().splitlines()  # the entrypoint ran twice, each task once
        assert [line.rsplit("|", 1)[0] for line in lines] == ["ops|disk", "ops|disk-2"], lines
        keys = [line.rsplit("|", 1)[1] for line in lines]
        assert all(k.startswith(run.id + ":lgt_") for k in keys) and len(set(keys)) == 2
        finished = [e.tool_finished for e in evs if types([e]) == ["tool_finished"]]
        assert [(f.tool, f.status) for f in finished] == [
            ("file_ticket", events_pb2.TOOL_STATUS_SUCCESS)
        ] * 2
    finally:
        await c.close()


async def test_a_task_killed_inside_its_write_waits_for_a_person(
    tmp_path: Path, base_env: dict[str, str], dsn: str, procs: list[Any]
) -> None:
    env, ledger = task_env(tmp_path, base_env, dsn)
    first = start_runtime({**env, "LGTASK_PAUSE_S": "30"}, name="runtime-lgtask-1", timeout=90)
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run = await start(c, "once")
    for _ in range(600):  # written; the task now pauses inside the call
        if ledger.exists() and ledger.read_text():
            break
        await asyncio.sleep(0.05)
    await c.close()
    first.kill()

    second = start_runtime(env, name="runtime-lgtask-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        evs = await c.events(run.id, until="interrupt")
        intr = evs[-1].interrupt
        assert intr.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, types(evs)
        assert intr.payload.tool == "file_ticket" and intr.payload.target == "tickets/ops"
        assert len(ledger.read_text().splitlines()) == 1, "called again before a person decided"
        await decide(c, run.id, intr, events_pb2.DECISION_MARK_DONE)
        evs += await c.events(run.id, after=evs[-1].sequence, until="interrupt")
        await decide(c, run.id, evs[-1].interrupt, events_pb2.DECISION_REJECTED)
        evs += await c.events(run.id, after=evs[-1].sequence)
        assert types(evs)[-1] == "done", types(evs)
        assert_dense(evs)
        assert json.loads(evs[-1].done.output_json) == {
            "first": "marked done by alice",
            "second": "skipped",
        }
        assert len(ledger.read_text().splitlines()) == 1
    finally:
        await c.close()
