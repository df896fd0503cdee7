"""The payload convention of a node's interrupt() (tether_langgraph._interrupts), the answer a
graph gets back for each kind, and the agent kind's definition checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from tether_langgraph import TEXT_SCHEMA, GraphAgent, idempotency_key, write_tool
from tether_langgraph._driver import interrupt_key
from tether_langgraph._interrupts import UNANSWERED, question_of, resume_value
from tether_sdk import AgentDefinitionError


@dataclass
class Answer:
    kind: str
    decision: str
    data: dict[str, Any]


def test_kind_defaults_to_provide_input_and_a_plain_value_is_a_text_question() -> None:
    q = question_of("Which service?")
    assert (q.kind, q.fields["prompt"], q.fields["schema"], q.text_only) == (
        "provide_input",
        "Which service?",
        TEXT_SCHEMA,
        True,
    )
    assert resume_value(q, Answer(q.kind, "responded", {"fill": {"text": "checkout"}})) == (
        "checkout"
    )
    assert question_of({"question": "Name?"}).kind == "provide_input"
    assert question_of({"kind": "not-a-kind", "prompt": "x"}).kind == "provide_input"


def test_a_schema_form_resumes_with_the_filled_object() -> None:
    schema = {"type": "object", "properties": {"owner": {"type": "string"}}}
    q = question_of({"kind": "provide_input", "prompt": "Who?", "schema": schema})
    assert q.fields["schema"] == schema and not q.text_only
    fill = {"owner": "alice"}
    assert resume_value(q, Answer(q.kind, "responded", {"fill": fill})) == fill


def test_confirm_action_card_and_its_boolean_answer() -> None:
    q = question_of(
        {
            "kind": "confirm_action",
            "title": "Restart checkout",
            "risk": "high",
            "summary": "service=checkout",
            "action": "service.restart",
            "scope": "checkout",
        }
    )
    assert (q.kind, q.action, q.scope) == ("confirm_action", "service.restart", "checkout")
    assert q.fields["parameter_summary"] == "service=checkout"
    assert q.fields["target"] == "checkout"  # the scope, when no target is given
    assert resume_value(q, Answer(q.kind, "approved", {})) is True
    assert resume_value(q, Answer(q.kind, "rejected", {})) is False
    assert resume_value(q, Answer(q.kind, "expired", {})) is False


def test_select_option_takes_strings_or_option_dicts() -> None:
    q = question_of({"kind": "select_option", "prompt": "Which?", "options": ["a", {"value": "b"}]})
    assert [o["value"] for o in q.fields["options"]] == ["a", "b"]
    assert resume_value(q, Answer(q.kind, "responded", {"option": "b"})) == "b"


def test_an_unanswered_question_is_never_resumed_with_a_made_up_answer() -> None:
    q = question_of("Which service?")
    assert resume_value(q, Answer(q.kind, "expired", {})) is UNANSWERED


def test_interrupt_keys_are_stable_and_tell_two_questions_of_one_node_apart() -> None:
    assert interrupt_key("i1", {"a": 1, "b": 2}) == interrupt_key("i1", {"b": 2, "a": 1})
    assert interrupt_key("i1", "x") != interrupt_key("i1", "y")
    assert interrupt_key("i1", "x") != interrupt_key("i2", "x")


async def test_a_write_tool_outside_tether_simply_calls_the_tool() -> None:
    calls: list[tuple[str, str | None]] = []

    @write_tool(action="service.restart", scope="{service}")
    @tool
    async def restart(service: str) -> str:
        """Restart a service."""
        calls.append((service, idempotency_key()))
        return f"{service} restarted"

    assert restart.name == "restart" and restart.description == "Restart a service."
    assert restart.scope_of({"service": "checkout"}) == "checkout"
    assert await restart.ainvoke({"service": "checkout"}) == "checkout restarted"
    assert calls == [("checkout", None)]


def test_write_tool_refuses_a_missing_action_or_a_plain_function() -> None:
    @tool
    async def restart(service: str) -> str:
        """Restart a service."""
        return service

    with pytest.raises(ValueError, match="noun.verb"):
        write_tool(restart, action="restart")
    with pytest.raises(TypeError, match="LangChain tool"):
        write_tool(action="service.restart")(restart.coroutine)  # type: ignore[arg-type]


def test_a_graph_agent_needs_a_graph() -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    assert GraphAgent(name="ok", description="d", graph=builder).check()
    assert GraphAgent(name="ok2", description="d", graph=builder.compile()).check()
    with pytest.raises(AgentDefinitionError, match="StateGraph or compiled graph"):
        GraphAgent(name="bad", description="d", graph=object()).check()
    with pytest.raises(AgentDefinitionError, match="static breakpoints"):
        GraphAgent(
            name="bp", description="d", graph=builder.compile(interrupt_before=["noop"])
        ).check()


def test_a_plain_dict_keeps_no_grant_and_its_card_comes_from_common_keys() -> None:
    q = question_of(
        {"action": "page on-call", "description": "Pages sev2", "resource": "queue/ops", "x": 1}
    )
    assert (q.kind, q.action, q.scope, q.text_only) == ("provide_input", "", "", True)
    assert q.fields["title"] == "page on-call" and q.fields["prompt"] == "Pages sev2"
    assert q.fields["target"] == "queue/ops"
    bare = question_of({"x": 1})
    assert bare.fields["prompt"] == '{"x": 1}'  # nothing to read: the payload itself


def test_approve_and_reject_of_a_plain_question_resume_with_true_and_false() -> None:
    q = question_of({"question": "Escalate?"})
    assert resume_value(q, Answer(q.kind, "approved", {})) is True
    assert resume_value(q, Answer(q.kind, "rejected", {})) is False
    assert resume_value(question_of("ok?"), Answer("provide_input", "approved", {})) is True


def test_a_human_interrupt_is_accepted_or_ignored_as_langgraph_says() -> None:
    request = {
        "action_request": {"action": "restart", "args": {"service": "api", "force": True}},
        "config": {"allow_accept": True},
        "description": "Restart api?",
    }
    one = question_of(request)
    assert one.fields["title"] == "restart" and one.fields["prompt"] == "Restart api?"
    assert one.fields["parameter_summary"] == "force=True, service=api"
    accept = {"type": "accept", "args": None}
    assert resume_value(one, Answer(one.kind, "approved", {})) == accept
    assert resume_value(one, Answer(one.kind, "rejected", {})) == {"type": "ignore", "args": None}
    listed = question_of([request])
    assert listed.fields["title"] == "restart"
    assert resume_value(listed, Answer(listed.kind, "approved", {})) == [accept]


def test_an_exact_value_wins_whatever_the_kind() -> None:
    exact = {"type": "response", "args": "use the blue one"}
    for payload in ("x", {"kind": "confirm_action", "title": "t"}, {"kind": "select_option"}):
        q = question_of(payload)
        assert resume_value(q, Answer(q.kind, "responded", {"value": exact})) == exact
    q = question_of("x")
    assert resume_value(q, Answer(q.kind, "responded", {"value": None})) is None


def test_values_are_plain_json_with_messages_as_langgraphs_server_sends_them() -> None:
    from datetime import date

    from langchain_core.messages import AIMessage, HumanMessage
    from tether_langgraph._json import plain

    value = plain(
        {
            "messages": [HumanMessage("hi", id="h"), AIMessage("yo", id="a")],
            "tags": {"x"},
            "day": date(2026, 12, 4),
        }
    )
    human, ai = value["messages"]
    assert (human["type"], human["content"], human["id"]) == ("human", "hi", "h")
    assert (ai["type"], ai["tool_calls"], ai["invalid_tool_calls"]) == ("ai", [], [])
    assert "lc" not in ai  # not LangChain's own serialised form
    assert value["tags"] == ["x"] and value["day"] == "2026-12-04"


async def test_a_write_task_outside_tether_simply_calls_the_function() -> None:
    from tether_langgraph import write_task

    @write_task(action="ticket.file", scope="tickets/{queue}")
    async def file_ticket(queue: str, note: str = "n") -> str:
        return f"{queue}/{note}/{idempotency_key()}"

    assert await file_ticket("ops") == "ops/n/None"
    with pytest.raises(ValueError, match="noun.verb"):
        write_task(action="file")
    with pytest.raises(TypeError, match="async function"):
        write_task(action="ticket.file")(lambda: None)


def test_the_answer_stored_without_an_output_function() -> None:
    from types import SimpleNamespace

    from langchain_core.messages import AIMessage, HumanMessage
    from tether_langgraph._driver import SHORT_ANSWER, GraphRun

    run: Any = SimpleNamespace(agent=SimpleNamespace(output=None))

    def output(values: Any) -> str:
        return GraphRun._output(run, values)

    messages = [HumanMessage("q"), AIMessage("the answer"), HumanMessage("thanks")]
    assert output({"messages": messages}) == "the answer"
    assert output("an entrypoint's text") == "an entrypoint's text"
    assert output({"title": "t", "n": 1}) == '{"title":"t","n":1}'
    long = output({"k": "x" * 5000})
    assert len(long) == SHORT_ANSWER and long.endswith("…")
