"""A LangGraph graph as a Tether agent, on a real runtime process: the interrupt convention for
each kind (confirm_action / provide_input / select_option, and what `interrupt()` returns), a
write made before an `interrupt()` in the same node performed once although LangGraph re-runs
the node at every resume, `custom` writes as tool_progress, dense events."""

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

# A runtime loading a graph imports langchain and langgraph: slower to start on a busy machine.
STARTUP_S = 90

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(120)]

# A user's graph package: one node writes, then asks three questions, then writes again.
GRAPH = '''
import asyncio
import os
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt
from tether_langgraph import GraphAgent, idempotency_key, write_tool


@write_tool(action="ticket.file", scope="tickets/{queue}")
@tool
async def file_ticket(queue: str, note: str) -> str:
    """File a ticket."""
    with open(os.environ["LGTEST_LEDGER"], "a") as f:
        f.write(f"{queue}|{note}|{idempotency_key()}\\n")
    await asyncio.sleep(float(os.environ.get("LGTEST_PAUSE_S") or 0))  # inside the call
    return f"filed {note}"


async def act(state):
    first = await file_ticket.ainvoke({"queue": "ops", "note": "opened"})
    name = interrupt("Which service?")
    priority = interrupt({"kind": "select_option", "prompt": "Priority?", "options": ["low", "high"]})
    form = interrupt({"kind": "provide_input", "prompt": "Details", "schema": {
        "type": "object", "properties": {"owner": {"type": "string"}}, "required": ["owner"]}})
    ok = interrupt({"kind": "confirm_action", "title": f"File {name}?", "risk": "low"})
    get_stream_writer()({"progress": 0.5, "text": "filing"})
    second = await file_ticket.ainvoke({"queue": "ops", "note": f"{name}/{priority}/{form['owner']}"}) if ok else "skipped"
    return {"messages": [AIMessage(f"{first}; {second}; approved={ok}")]}


builder = StateGraph(MessagesState)
builder.add_node("act", act)
builder.add_edge(START, "act")
builder.add_edge("act", END)
agent = GraphAgent(name="lgtest", description="A graph that asks and writes", graph=builder)


async def once(state):
    return {"messages": [AIMessage(await file_ticket.ainvoke({"queue": "ops", "note": "once"}))]}


single = StateGraph(MessagesState)
single.add_node("once", once)
single.add_edge(START, "once")
single.add_edge("once", END)
writer = GraphAgent(name="lgwriter", description="A graph that writes once", graph=single)
'''


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


def graph_env(tmp: Path, base_env: dict[str, str], dsn: str) -> tuple[dict[str, str], Path]:
    """A runtime's environment loading the graphs above from a package of the user's own."""
    write_package(tmp, "lgtest_graph", GRAPH)
    ledger = tmp / "ledger.txt"
    env = {
        **base_env,
        "DATABASE_URL": dsn,
        "TETHER_AGENTS": "lgtest_graph:agent,lgtest_graph:writer",
        "LGTEST_LEDGER": str(ledger),
    }
    return env_with_path(env, tmp), ledger


async def answer(c: Client, run_id: str, intr: Any, decision: int, text: str = "") -> None:
    await c.stub.ResumeRun(
        pb.ResumeRunRequest(
            run_id=run_id,
            interrupt_id=intr.interrupt_id,
            decision=decision,
            input=text,
            idempotency_key=uuid.uuid4().hex,
        ),
        metadata=c.md,
        timeout=10,
    )


async def test_questions_and_a_write_before_an_interrupt_run_once(
    tmp_path: Path, base_env: dict[str, str], dsn: str, procs: list[Any]
) -> None:
    env, ledger = graph_env(tmp_path, base_env, dsn)
    proc = start_runtime(env, name="runtime-lgtest", timeout=STARTUP_S)
    procs.append(proc)
    c = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        run = (await c.start(await c.conversation(), "file a ticket", agent="lgtest")).run
        seen: list[Any] = []
        kinds = []
        replies = [
            (events_pb2.DECISION_RESPONDED, json.dumps({"text": "checkout"})),
            (events_pb2.DECISION_RESPONDED, "high"),
            (events_pb2.DECISION_RESPONDED, json.dumps({"owner": "alice"})),
            (events_pb2.DECISION_APPROVED, ""),
        ]
        for decision, text in replies:
            evs = await c.events(run.id, after=len(seen), until="interrupt")
            seen += evs
            intr = evs[-1].interrupt
            kinds.append(intr.kind)
            await answer(c, run.id, intr, decision, text)
        seen += await c.events(run.id, after=len(seen))
        assert kinds == [
            resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT,
            resources_pb2.INTERRUPT_KIND_SELECT_OPTION,
            resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT,
            resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION,
        ]
        assert types(seen)[-1] == "done", types(seen)
        assert_dense(seen)
        # The node ran five times (once, then after each answer); the first write once.
        lines = ledger.read_text().splitlines()
        assert [line.rsplit("|", 1)[0] for line in lines] == [
            "ops|opened",
            "ops|checkout/high/alice",
        ], lines
        keys = [line.rsplit("|", 1)[1] for line in lines]
        assert all(k.startswith(run.id + ":lgw_") for k in keys) and len(set(keys)) == 2
        started = [e.tool_started.call_id for e in seen if types([e]) == ["tool_started"]]
        finished = [e.tool_finished.call_id for e in seen if types([e]) == ["tool_finished"]]
        assert len(started) == len(set(started)) == 2 and sorted(started) == sorted(finished)
        progress = [e.tool_progress for e in seen if types([e]) == ["tool_progress"]]
        assert [(p.fraction, p.text) for p in progress] == [(0.5, "filing")]
        text = "".join(e.text_delta.delta for e in seen if types([e]) == ["text_delta"])
        assert text == "filed opened; filed checkout/high/alice; approved=True", text
    finally:
        await c.close()


@pytest.mark.parametrize(
    ("decision", "writes", "status", "summary"),
    [
        (events_pb2.DECISION_ABANDON, 1, events_pb2.TOOL_STATUS_ERROR, "not tried again (abandon)"),
        (events_pb2.DECISION_MARK_DONE, 1, events_pb2.TOOL_STATUS_SUCCESS, "marked done by alice"),
        (events_pb2.DECISION_RETRY, 2, events_pb2.TOOL_STATUS_SUCCESS, "filed once"),
    ],
    ids=["abandon", "mark_done", "retry"],
)
async def test_a_write_a_dead_worker_left_executing_waits_for_a_person(
    tmp_path: Path,
    base_env: dict[str, str],
    dsn: str,
    procs: list[Any],
    decision: int,
    writes: int,
    status: int,
    summary: str,
) -> None:
    """Killed inside a write that is not idempotent by key: nobody can tell whether it acted,
    so the run asks a person (outcome_unknown) instead of calling again; only `retry` calls it
    again, with the same key. Needs Tether's Postgres checkpointer (the graph's progress
    survives the kill)."""
    env, ledger = graph_env(tmp_path, base_env, dsn)
    first = start_runtime(
        {**env, "LGTEST_PAUSE_S": "30"}, name="runtime-lgwriter-1", timeout=STARTUP_S
    )
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run = (await c.start(await c.conversation(), "file it", agent="lgwriter")).run
    for _ in range(600):  # written; the tool now pauses inside the call
        if ledger.exists() and ledger.read_text():
            break
        await asyncio.sleep(0.05)
    await c.close()
    first.kill()

    second = start_runtime(env, name="runtime-lgwriter-2", timeout=STARTUP_S)
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        evs = await c.events(run.id, until="interrupt")
        intr = evs[-1].interrupt
        assert intr.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, types(evs)
        assert intr.payload.tool == "file_ticket" and intr.payload.target == "tickets/ops"
        assert len(ledger.read_text().splitlines()) == 1, "called again before a person decided"
        await answer(c, run.id, intr, decision)
        evs += await c.events(run.id, after=evs[-1].sequence)
        assert types(evs)[-1] == "done", types(evs)
        assert_dense(evs)
        lines = ledger.read_text().splitlines()
        assert len(lines) == writes and len(set(lines)) == 1, lines  # a retry: the same key
        finished = [e.tool_finished for e in evs if types([e]) == ["tool_finished"]]
        assert [(f.tool, f.status) for f in finished] == [("file_ticket", status)]
        assert summary in finished[0].summary
        started = [e.tool_started.call_id for e in evs if types([e]) == ["tool_started"]]
        assert started == [finished[0].call_id]
    finally:
        await c.close()
