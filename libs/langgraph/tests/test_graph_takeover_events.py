"""A graph's own events (GraphUpdate, GraphValues, CustomData) after a takeover and a resume, on
real runtime processes: a runtime SIGKILLed inside a node, while a parallel node of the same step
has finished, then another runtime continues the graph from its checkpoint; the re-run node's
custom write, the finished node's update that LangGraph re-sends (`cached`) and the state it
re-shows are not sent again. Then an interrupt and a resume: the node re-runs from its start and
its custom write before `interrupt()` is not sent again either. Each node's update, each custom
write and each step's state appear exactly once in the log, and the final state is right."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

STARTUP_S = 90

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(180)]

# plan -> (fast | slow, in one step) -> ask (interrupts) -> publish. `slow` pauses inside, on its
# first run only (the marker file names the process it ran in).
GRAPH = """
import asyncio
import operator
import os
from typing import Annotated

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class Post(TypedDict, total=False):
    topic: str
    log: Annotated[list[str], operator.add]
    answer: str


def plan(state):
    get_stream_writer()({"stage": "plan"})
    return {"log": [f"plan {state['topic']}"]}


def fast(state):
    get_stream_writer()({"stage": "fast"})
    return {"log": ["fast"]}


async def slow(state):
    write = get_stream_writer()
    write({"stage": "slow", "at": "start"})
    mark = os.environ["LGTAKE_MARK"]
    first = not os.path.exists(mark)
    with open(mark, "a") as f:
        f.write(f"{os.getpid()}\\n")
    if first:
        await asyncio.sleep(60)  # killed here
    write({"stage": "slow", "at": "end"})
    return {"log": ["slow"]}


def ask(state):
    get_stream_writer()({"stage": "ask"})
    answer = interrupt({"title": f"Publish {state['topic']}?", "target": "blog"})
    return {"answer": str(answer), "log": ["ask"]}


def publish(state):
    get_stream_writer()({"stage": "publish"})
    return {"log": ["publish"]}


builder = StateGraph(Post)
for node in (plan, fast, slow, ask, publish):
    builder.add_node(node.__name__, node)
builder.add_edge(START, "plan")
builder.add_edge("plan", "fast")
builder.add_edge("plan", "slow")
builder.add_edge(["fast", "slow"], "ask")
builder.add_edge("ask", "publish")
builder.add_edge("publish", END)
graph = builder.compile()
"""


async def read_until(
    c: Client, run_id: str, done: Callable[[list[Any]], bool], timeout: float = 60
) -> list[Any]:
    """The run's events from the start, streamed until `done(events)`."""
    out: list[Any] = []
    call = c.stub.StreamRunEvents(
        pb.StreamRunEventsRequest(run_id=run_id, after_sequence=0), metadata=c.md, timeout=timeout
    )
    async for resp in call:
        out += resp.events
        if done(out):
            call.cancel()
            return out
    return out


def graph_events(evs: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """(node, update, step), (state, step), (data, step) of a log."""
    updates, values, custom = [], [], []
    for e in evs:
        kind = types([e])[0]
        if kind == "graph_update":
            u = e.graph_update
            updates.append((u.node, json.loads(u.update_json), u.step))
        elif kind == "graph_values":
            values.append((json.loads(e.graph_values.values_json), e.graph_values.step))
        elif kind == "custom_data":
            custom.append((json.loads(e.custom_data.data_json), e.custom_data.step))
    return updates, values, custom


async def test_a_takeover_and_a_resume_send_each_graph_event_once(
    tmp_path: Path, base_env: dict[str, str], dsn: str, procs: list[Proc]
) -> None:
    write_package(tmp_path, "lgtake_graph", GRAPH)
    mark = tmp_path / "slow.txt"
    env = env_with_path(
        {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_AGENTS": "lgtake_graph:graph",
            "LGTAKE_MARK": str(mark),
        },
        tmp_path,
    )
    # Two runtimes from the start: whichever claims the run is killed inside `slow`.
    runtimes = [start_runtime(env, name=f"runtime-lgtake-{i}", timeout=STARTUP_S) for i in (1, 2)]
    procs.extend(runtimes)
    c = Client(runtimes[0].addr, token(TEST_SECRET, "alice"))
    try:
        started = await c.stub.StartRun(
            pb.StartRunRequest(
                conversation_id=await c.conversation(),
                agent="graph",
                input_json=json.dumps({"topic": "q3", "log": []}),
            ),
            metadata=c.md,
            timeout=10,
        )
        run_id = started.run.id

        def killable(evs: list[Any]) -> bool:
            updates, _, custom = graph_events(evs)
            return ("fast", {"log": ["fast"]}) in [(n, u) for n, u, _ in updates] and {
                "stage": "slow",
                "at": "start",
            } in [d for d, _ in custom]

        before = await read_until(c, run_id, killable)
        for _ in range(200):
            if mark.exists() and mark.read_text():
                break
            await asyncio.sleep(0.05)
        (pid,) = [int(line) for line in mark.read_text().split()]
        (victim,) = [p for p in runtimes if p.pid == pid]
        (survivor,) = [p for p in runtimes if p is not victim]
        victim.kill()  # inside `slow`, with `fast` finished in the same step
        await c.close()

        c = Client(survivor.addr, token(TEST_SECRET, "alice"))
        evs = await read_until(c, run_id, lambda e: types(e)[-1] == "interrupt")
        assert len(mark.read_text().split()) == 2, "slow ran again on the survivor"
        intr = evs[-1].interrupt
        assert json.loads(intr.payload.value_json)["title"] == "Publish q3?"
        await c.stub.ResumeRun(
            pb.ResumeRunRequest(
                run_id=run_id,
                interrupt_id=intr.interrupt_id,
                decision=events_pb2.DECISION_APPROVED,
                idempotency_key=uuid.uuid4().hex,
            ),
            metadata=c.md,
            timeout=10,
        )
        evs = await read_until(c, run_id, lambda e: types(e)[-1] in ("done", "error"))
    finally:
        await c.close()

    assert types(evs)[-1] == "done", types(evs)
    assert_dense(evs)
    assert [e.SerializeToString() for e in evs[: len(before)]] == [
        e.SerializeToString() for e in before
    ], "the log changed under the takeover"
    final = {
        "topic": "q3",
        "log": ["plan q3", "fast", "slow", "ask", "publish"],
        "answer": "True",
    }
    assert json.loads(evs[-1].done.output_json) == final
    updates, values, custom = graph_events(evs)
    # Each node's update once, in order, with the step it went into.
    assert sorted((n, u) for n, u, _ in updates) == sorted(
        [
            ("plan", {"log": ["plan q3"]}),
            ("fast", {"log": ["fast"]}),
            ("slow", {"log": ["slow"]}),
            ("ask", {"answer": "True", "log": ["ask"]}),
            ("publish", {"log": ["publish"]}),
        ]
    ), updates
    steps = {n: s for n, _, s in updates}
    assert steps["fast"] == steps["slow"] == steps["plan"] + 1
    assert steps["publish"] == steps["ask"] + 1 == steps["slow"] + 2
    # Each custom write once (the re-run `slow` and `ask` wrote theirs again), at its node's step.
    assert [d for d, _ in custom if d["stage"] != "fast"] == [
        {"stage": "plan"},
        {"stage": "slow", "at": "start"},
        {"stage": "slow", "at": "end"},
        {"stage": "ask"},
        {"stage": "publish"},
    ], custom
    assert sorted(d["stage"] for d, _ in custom).count("fast") == 1
    assert all(s == steps[d["stage"]] for d, s in custom), custom
    # The state: the input merged, then once after each step (none re-shown, none at the pause).
    assert [s for _, s in values] == sorted({s for _, s in values}), values
    assert [v["log"] for v, _ in values] == [
        [],
        ["plan q3"],
        ["plan q3", "fast", "slow"],
        ["plan q3", "fast", "slow", "ask"],
        final["log"],
    ], values
    assert values[-1] == (final, steps["publish"])
    assert {"__metadata__"}.isdisjoint(n for n, _, _ in updates)
