"""Tether as a LangGraph server (issue 30), on a real runtime process: graphs loaded without a
wrapper (`module:graph`, a langgraph.json), a dict input handed to the graph whole, the final
state stored and returned, the graph's updates / values / custom writes as events, interrupts
carried whole and resumed with approve, reject or an exact value; a native agent started from
`input_json`."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

STARTUP_S = 90

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(180)]

# A compiled graph over a dict state (no messages), named by TETHER_AGENTS with no wrapper.
TICKETS = """
import operator
from typing import Annotated, Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict  # pydantic's JSON Schema needs it before Python 3.12


class Ticket(TypedDict, total=False):
    title: str
    priority: int
    notes: Annotated[list[str], operator.add]
    decision: Any


def triage(state):
    get_stream_writer()({"stage": "triage", "score": 7})
    return {"notes": [f"triaged {state['title']}"], "priority": state.get("priority", 1) + 1}


def ask(state):
    decision = interrupt({
        "title": f"Escalate {state['title']}?",
        "target": "queue/ops",
        "description": "Escalation pages the on-call engineer",
        "severity": "sev2",
        "api_key": "sk-live-0123456789abcdef0123",
    })
    return {"decision": decision, "notes": ["asked"]}


builder = StateGraph(Ticket)
builder.add_node("triage", triage)
builder.add_node("ask", ask)
builder.add_edge(START, "triage")
builder.add_edge("triage", "ask")
builder.add_edge("ask", END)
hitl = builder.compile()
"""

# A messages graph in a file of a langgraph.json project, asking with LangGraph's HumanInterrupt.
INBOX = """
import os

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt


def reply(state):
    said = state["messages"][-1].content
    return {"messages": [AIMessage(f"{os.environ['LGFID_GREETING']} {said}", id="ai-1")]}


def confirm(state):
    (answer,) = interrupt([{
        "action_request": {"action": "restart", "args": {"service": "api"}},
        "config": {"allow_accept": True, "allow_ignore": True, "allow_respond": True,
                   "allow_edit": False},
        "description": "Restart the api service?",
    }])
    return {"messages": [AIMessage(f"answer={answer}", id="ai-2")]}


builder = StateGraph(MessagesState)
builder.add_node("reply", reply)
builder.add_node("confirm", confirm)
builder.add_edge(START, "reply")
builder.add_edge("reply", "confirm")
builder.add_edge("confirm", END)
graph = builder.compile()
"""


@pytest.fixture(scope="module")
def runtime(
    tmp_path_factory: pytest.TempPathFactory, base_env: dict[str, str], dsn: str
) -> Iterator[Proc]:
    root = tmp_path_factory.mktemp("lgfid")
    write_package(root, "lgfid_graph", TICKETS)
    project = root / "project"
    project.mkdir()
    (project / "inbox_graph.py").write_text(INBOX)
    (project / ".env").write_text("# the graph's own settings\nLGFID_GREETING='hello'\n")
    (project / "langgraph.json").write_text(
        json.dumps(
            {"graphs": {"inbox": "./inbox_graph.py:graph"}, "env": ".env", "dependencies": ["."]}
        )
    )
    env = {
        **base_env,
        "DATABASE_URL": dsn,
        "TETHER_AGENTS": f"lgfid_graph:hitl,{project / 'langgraph.json'}",
    }
    proc = start_runtime(env_with_path(env, root), name="runtime-lgfid", timeout=STARTUP_S)
    yield proc
    proc.kill()


@pytest.fixture
async def c(runtime: Proc) -> AsyncIterator[Client]:
    client = Client(runtime.addr, token(TEST_SECRET, "alice"))
    yield client
    await client.close()


async def start(c: Client, agent: str, graph_input: dict[str, Any], text: str = "") -> Any:
    request = pb.StartRunRequest(
        conversation_id=await c.conversation(),
        agent=agent,
        text=text,
        input_json=json.dumps(graph_input),
    )
    return (await c.stub.StartRun(request, metadata=c.md, timeout=10)).run


async def decide(c: Client, run_id: str, intr: Any, decision: int, value: Any = None) -> None:
    await c.stub.ResumeRun(
        pb.ResumeRunRequest(
            run_id=run_id,
            interrupt_id=intr.interrupt_id,
            decision=decision,
            value_json="" if value is None else json.dumps(value),
            idempotency_key=uuid.uuid4().hex,
        ),
        metadata=c.md,
        timeout=10,
    )


def of_type(evs: list[Any], kind: str) -> list[Any]:
    return [getattr(e, kind) for e in evs if types([e]) == [kind]]


async def test_graphs_load_without_a_wrapper_and_list_their_kind_and_schemas(c: Client) -> None:
    listed = await c.stub.ListAgents(pb.ListAgentsRequest(), metadata=c.md, timeout=10)
    agents = {a.name: a for a in listed.agents}
    assert agents["hitl"].kind == "graph" and agents["inbox"].kind == "graph"
    assert agents["opspilot"].kind == "native" and not agents["opspilot"].input_schema_json
    ticket = json.loads(agents["hitl"].input_schema_json)
    assert {"title", "priority", "notes", "decision"} <= set(ticket["properties"])
    assert "messages" in json.loads(agents["inbox"].state_schema_json)["properties"]
    assert json.loads(agents["inbox"].output_schema_json)["properties"]


async def test_a_dict_input_goes_in_whole_and_the_final_state_comes_back(c: Client) -> None:
    run = await start(c, "hitl", {"title": "disk full", "priority": 2})
    evs = await c.events(run.id, until="interrupt")
    intr = evs[-1].interrupt
    # The payload whole (its secret masked), and a card read from its common keys.
    value = json.loads(intr.payload.value_json)
    assert value["severity"] == "sev2" and value["title"] == "Escalate disk full?"
    assert "sk-live" not in intr.payload.value_json
    assert intr.payload.title == "Escalate disk full?"
    assert intr.payload.target == "queue/ops"
    assert intr.payload.details == "Escalation pages the on-call engineer"
    # A plain interrupt takes a Tether approve: the graph resumes with True.
    await decide(c, run.id, intr, events_pb2.DECISION_APPROVED)
    evs += await c.events(run.id, after=evs[-1].sequence)
    assert types(evs)[-1] == "done", types(evs)
    assert_dense(evs)
    final = {
        "title": "disk full",
        "priority": 3,
        "notes": ["triaged disk full", "asked"],
        "decision": True,
    }
    assert json.loads(evs[-1].done.output_json) == final
    got = await c.stub.GetRun(pb.GetRunRequest(run_id=run.id), metadata=c.md, timeout=10)
    assert json.loads(got.run.output_json) == final
    # The graph's streams: the state at the start (the input merged) and after each step, each
    # node's update, the custom write whole (not in the progress convention: no tool_progress).
    values = [json.loads(v.values_json) for v in of_type(evs, "graph_values")]
    assert values[0] == {"title": "disk full", "priority": 2, "notes": []}
    assert values[-1] == final
    updates = [(u.node, json.loads(u.update_json)) for u in of_type(evs, "graph_update")]
    assert ("triage", {"notes": ["triaged disk full"], "priority": 3}) in updates
    assert ("ask", {"decision": True, "notes": ["asked"]}) in updates
    assert [json.loads(d.data_json) for d in of_type(evs, "custom_data")] == [
        {"stage": "triage", "score": 7}
    ]
    assert not of_type(evs, "tool_progress")
    # No messages in the state: the stored answer is the state, as JSON.
    listed = await c.stub.ListMessages(
        pb.ListMessagesRequest(conversation_id=run.conversation_id), metadata=c.md, timeout=10
    )
    user, answer = listed.messages
    assert json.loads(user.content) == {"title": "disk full", "priority": 2}
    assert json.loads(answer.content) == final


async def test_reject_and_an_exact_value_resume_a_plain_interrupt(c: Client) -> None:
    rejected = await start(c, "hitl", {"title": "a"})
    exact = await start(c, "hitl", {"title": "b"})
    for run, decision, value in (
        (rejected, events_pb2.DECISION_REJECTED, None),
        (exact, events_pb2.DECISION_RESPONDED, {"type": "edit", "args": {"queue": "sre"}}),
    ):
        evs = await c.events(run.id, until="interrupt")
        await decide(c, run.id, evs[-1].interrupt, decision, value)
    for run, expected in ((rejected, False), (exact, {"type": "edit", "args": {"queue": "sre"}})):
        evs = await c.events(run.id)
        assert types(evs)[-1] == "done", types(evs)
        assert json.loads(evs[-1].done.output_json)["decision"] == expected


async def test_a_langgraph_json_graph_with_messages_and_a_human_interrupt(c: Client) -> None:
    run = await start(c, "inbox", {"messages": [{"role": "user", "content": "ping"}]})
    evs = await c.events(run.id, until="interrupt")
    intr = evs[-1].interrupt
    assert json.loads(intr.payload.value_json)[0]["action_request"]["action"] == "restart"
    assert intr.payload.title == "restart" and intr.payload.details == "Restart the api service?"
    assert intr.payload.parameter_summary == "service=api"
    # The node that asked and the nodes a resume runs, as LangGraph's state names them.
    assert intr.payload.graph_node == "confirm" and list(intr.payload.graph_next) == ["confirm"]
    # The text names its message (its id in the state) and the node that wrote it.
    deltas = of_type(evs, "text_delta")
    assert deltas and {(d.graph_message_id, d.graph_node) for d in deltas} == {("ai-1", "reply")}
    assert all(d.graph_namespace.startswith("reply:") for d in deltas), deltas
    await decide(c, run.id, intr, events_pb2.DECISION_APPROVED)
    evs += await c.events(run.id, after=evs[-1].sequence)
    assert types(evs)[-1] == "done", types(evs)
    # Messages as LangGraph's server sends them: their fields, `type` first among equals.
    messages = json.loads(evs[-1].done.output_json)["messages"]
    assert [(m["type"], m["content"]) for m in messages] == [
        ("human", "ping"),
        ("ai", "hello ping"),  # LGFID_GREETING from the project's .env
        ("ai", "answer={'type': 'accept', 'args': None}"),
    ]
    assert messages[1]["id"] == "ai-1" and messages[1]["tool_calls"] == []
    text = "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])
    assert text.startswith("hello ping"), text
    after = {(d.graph_message_id, d.graph_node) for d in of_type(evs, "text_delta")}
    assert after == {("ai-1", "reply"), ("ai-2", "confirm")}, after
    listed = await c.stub.ListMessages(
        pb.ListMessagesRequest(conversation_id=run.conversation_id), metadata=c.md, timeout=10
    )
    assert [m.content for m in listed.messages] == [
        "ping",
        "answer={'type': 'accept', 'args': None}",
    ]


async def test_a_native_agent_takes_the_last_user_message_of_input_json(c: Client) -> None:
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"type": "human", "content": [{"type": "text", "text": "check payment-api"}]},
    ]
    run = await start(c, "opspilot", {"messages": messages})
    listed = await c.stub.ListMessages(
        pb.ListMessagesRequest(conversation_id=run.conversation_id), metadata=c.md, timeout=10
    )
    assert listed.messages[0].content == "check payment-api"
    conv = await c.conversation()
    for agent, body, text in (
        ("opspilot", json.dumps({"messages": [{"role": "assistant", "content": "x"}]}), ""),
        ("hitl", "[1, 2]", ""),
        ("hitl", "{not json", ""),
        ("hitl", "", "  "),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await c.stub.StartRun(
                pb.StartRunRequest(conversation_id=conv, agent=agent, text=text, input_json=body),
                metadata=c.md,
                timeout=10,
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (agent, body)
    listed = await c.stub.ListMessages(
        pb.ListMessagesRequest(conversation_id=conv), metadata=c.md, timeout=10
    )
    assert not listed.messages  # nothing stored by a refused start


async def test_value_json_goes_with_respond_only(c: Client) -> None:
    run = await start(c, "hitl", {"title": "c"})
    evs = await c.events(run.id, until="interrupt")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await decide(c, run.id, evs[-1].interrupt, events_pb2.DECISION_APPROVED, {"x": 1})
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    await decide(c, run.id, evs[-1].interrupt, events_pb2.DECISION_RESPONDED, "v")
    evs = await c.events(run.id)
    assert json.loads(evs[-1].done.output_json)["decision"] == "v"


async def test_start_and_stream_takes_input_json_too(c: Client) -> None:
    call = c.stub.StartRunAndStreamEvents(
        pb.StartRunAndStreamEventsRequest(
            conversation_id=await c.conversation(),
            agent="hitl",
            input_json=json.dumps({"title": "streamed"}),
        ),
        metadata=c.md,
        timeout=30,
    )
    evs: list[Any] = []
    async for resp in call:
        evs += resp.events
        if "interrupt" in types(evs):
            call.cancel()
            break
    values = [json.loads(v.values_json) for v in of_type(evs, "graph_values")]
    assert values[0] == {"title": "streamed", "notes": []}
    assert json.loads(evs[-1].interrupt.payload.value_json)["title"] == "Escalate streamed?"
