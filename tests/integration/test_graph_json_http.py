"""A graph agent's JSON through the browser API and the Python client, on real processes (one
runtime loading a plain compiled graph, one gateway): `POST .../runs` with `input` (no text)
starts it with the dict whole; the SSE events carry `graph_values` / `graph_update` /
`custom_data` as parsed JSON, the interrupt its `payload.value`; `POST .../resume` with `value`
resumes `interrupt()` with exactly that value; `done` and `GET /v1/runs/{id}` carry the final
state as `output`. The same through `TetherClient.start(input=...)` / `resume(value=...)`."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from langgraph_sdk import get_client
from tether_client import TetherClient
from tether_common.auth import issue_token
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]

TICKETS = """
import operator
from typing import Annotated, Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class Ticket(TypedDict, total=False):
    title: str
    notes: Annotated[list[str], operator.add]
    decision: Any


def triage(state):
    get_stream_writer()({"stage": "triage", "score": 7})
    return {"notes": [f"triaged {state['title']}"]}


def ask(state):
    decision = interrupt({"title": f"Escalate {state['title']}?", "severity": "sev2"})
    return {"decision": decision}


builder = StateGraph(Ticket)
builder.add_node("triage", triage)
builder.add_node("ask", ask)
builder.add_edge(START, "triage")
builder.add_edge("triage", "ask")
builder.add_edge("ask", END)
tickets = builder.compile()
"""


@pytest.fixture(scope="module")
async def dsn(admin_dsn: str) -> AsyncIterator[str]:
    """A database of this module's own: no other test's runtime (which has not loaded the graph)
    can claim its runs."""
    fresh = await stores.create_fresh_database(admin_dsn)
    yield fresh
    await stores.drop_database(admin_dsn, fresh)


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, base_env: dict[str, str], dsn: str
) -> Iterator[tuple[Proc, Proc]]:
    root = tmp_path_factory.mktemp("graphjson")
    write_package(root, "graphjson_tickets", TICKETS)
    env = {**base_env, "DATABASE_URL": dsn, "TETHER_AGENTS": "graphjson_tickets:tickets"}
    env = env_with_path(env, root)
    runtime = start_runtime(env, name="runtime-graphjson", timeout=90)
    gateway = start_gateway(env, runtime.addr, name="gateway-graphjson")
    yield runtime, gateway
    gateway.terminate()
    runtime.kill()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


def _headers(**extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}", **extra}


async def _conversation(http: aiohttp.ClientSession, base: str) -> str:
    async with http.post(f"{base}/v1/conversations", json={}, headers=_headers()) as r:
        assert r.status == 201, await r.text()
        return str((await r.json())["conversation"]["id"])


async def test_http_input_value_and_the_graphs_events_as_json(
    stack: tuple[Proc, Proc], http: aiohttp.ClientSession
) -> None:
    base = stack[1].addr
    conv = await _conversation(http, base)
    resp = await http.post(
        f"{base}/v1/conversations/{conv}/runs",
        json={"input": {"title": "disk full"}, "agent": "tickets"},
        headers=_headers(Accept="text/event-stream"),
    )
    assert resp.status == 201, await resp.text()
    reader = SseReader(resp)
    first = [f.json for f in await reader.events_until("interrupt")]
    kinds = [e["type"] for e in first]
    assert kinds[0] == "run_started" and kinds[-1] == "interrupt", kinds
    values = [e["values"] for e in first if e["type"] == "graph_values"]
    assert values[0] == {"title": "disk full", "notes": []}, "the input, merged, whole"
    assert {"type": "graph_update", "node": "triage"}.items() <= next(
        e for e in first if e["type"] == "graph_update"
    ).items()
    update = next(e["update"] for e in first if e["type"] == "graph_update")
    assert update == {"notes": ["triaged disk full"]}
    assert [e["data"] for e in first if e["type"] == "custom_data"] == [
        {"stage": "triage", "score": 7}
    ]
    intr = first[-1]
    assert intr["payload"]["value"] == {"title": "Escalate disk full?", "severity": "sev2"}
    run_id = intr["runId"]
    async with http.get(f"{base}/v1/runs/{run_id}", headers=_headers()) as r:
        run = (await r.json())["run"]
    assert run["pendingInterrupt"]["payload"]["value"] == intr["payload"]["value"]
    assert run["output"] is None, "not completed yet"

    # A value that is not a graph's answer shape: refused with 400, nothing resumed.
    body = {"interruptId": intr["interruptId"], "idempotencyKey": uuid.uuid4().hex}
    async with http.post(
        f"{base}/v1/runs/{run_id}/resume",
        json={**body, "decision": "approve", "value": 1},
        headers=_headers(),
    ) as r:
        assert r.status == 400, await r.text()
    value = {"type": "edit", "args": {"queue": "sre"}, "note": "é"}
    async with http.post(
        f"{base}/v1/runs/{run_id}/resume",
        json={**body, "decision": "respond", "value": value},
        headers=_headers(),
    ) as r:
        assert r.status == 202, await r.text()
    rest = [f.json for f in await reader.events_until("done", "error")]
    final = {"title": "disk full", "notes": ["triaged disk full"], "decision": value}
    assert rest[-1]["type"] == "done", rest[-1]
    assert rest[-1]["output"] == final
    assert {"type": "graph_update", "node": "ask", "update": {"decision": value}}.items() <= next(
        e for e in rest if e["type"] == "graph_update"
    ).items()
    resp.close()
    async with http.get(f"{base}/v1/runs/{run_id}", headers=_headers()) as r:
        run = (await r.json())["run"]
    assert run["status"] == "completed" and run["output"] == final


async def test_python_client_start_input_and_resume_value(stack: tuple[Proc, Proc]) -> None:
    runtime = stack[0]
    async with TetherClient(runtime.addr, token=issue_token(TEST_SECRET, "alice")) as client:
        conv = await client.create_conversation("graph json")
        run = await client.start(conv.id, input={"title": "db slow"}, agent="tickets")
        events = []
        async for ev in client.stream(run.id):
            events.append(ev)
            if ev.WhichOneof("event") == "interrupt":
                break
        intr = events[-1].interrupt
        assert json.loads(intr.payload.value_json)["title"] == "Escalate db slow?"
        answer: Any = ["page", {"who": "sre"}, None]
        await client.resume(run.id, intr.interrupt_id, "respond", value=answer)
        again = await client.resume(run.id, intr.interrupt_id, "respond", value=answer)
        assert again.id == run.id, "the same value again: the first answer (the same key)"
        done = [ev async for ev in client.stream(run.id, after=events[-1].sequence)][-1]
        assert done.WhichOneof("event") == "done"
        assert json.loads(done.done.output_json)["decision"] == answer
        final = await client.get_run(run.id)
        assert json.loads(final.output_json) == {
            "title": "db slow",
            "notes": ["triaged db slow"],
            "decision": answer,
        }


async def test_the_langgraph_sdk_streams_joins_and_reads_a_graphs_state(
    stack: tuple[Proc, Proc],
) -> None:
    """A graph agent through the gateway's /langgraph with the official `langgraph-sdk` (its
    log brings its state: the gateway reads the thread's messages only when it has none yet,
    frames.py needs_history): the stream, the joins from several cut points, the thread's
    state and runs.wait agree."""
    token = issue_token(TEST_SECRET, "alice")
    lg = get_client(url=f"{stack[1].addr}/langgraph", headers={"Authorization": f"Bearer {token}"})
    try:
        t = (await lg.threads.create())["thread_id"]
        modes = ["values", "updates", "custom"]
        first = [
            p
            async for p in lg.runs.stream(
                t, "tickets", input={"title": "disk full"}, stream_mode=modes
            )
        ]
        run_id = first[0].data["run_id"]
        assert first[0].event == "metadata"
        values = [p.data for p in first if p.event == "values"]
        assert values[0] == {"title": "disk full", "notes": []}, "the input, merged, whole"
        asked = {"title": "Escalate disk full?", "severity": "sev2"}
        assert [i["value"] for i in values[-1]["__interrupt__"]] == [asked]
        assert [p.data for p in first if p.event == "custom"] == [{"stage": "triage", "score": 7}]
        for cut in (1, len(first) // 2, len(first) - 1):
            joined = [
                p
                async for p in lg.runs.join_stream(
                    t, run_id, stream_mode=modes, last_event_id=first[cut - 1].id
                )
            ]
            assert [(p.event, p.data, p.id) for p in joined] == [
                (p.event, p.data, p.id) for p in first[cut:]
            ], cut
        state = await lg.threads.get_state(t)
        assert state["values"] == {k: v for k, v in values[-1].items() if k != "__interrupt__"}
        assert [i["value"] for i in state["tasks"][0]["interrupts"]] == [asked]
        assert (await lg.runs.get(t, run_id))["status"] == "success"

        answer = {"queue": "sre", "note": "é"}
        final = await lg.runs.wait(t, "tickets", command={"resume": answer})
        whole = {"title": "disk full", "notes": ["triaged disk full"], "decision": answer}
        assert final == whole
        assert (await lg.threads.get_state(t))["values"] == whole
        assert (await lg.threads.get(t))["status"] == "idle"
    finally:
        await lg.aclose()
