"""What a run starts from (api/run_input.py): StartRun's text, or its `input_json` — a graph's
input whole, a native agent's last user message — and the starts refused, changing nothing."""

from __future__ import annotations

import json

import pytest
from tether_common.errors import InvalidArgument
from tether_common.message_text import user_text_of
from tether_runtime.api.run_input import MAX_INPUT_JSON, MAX_TEXT, run_input


def test_text_alone_starts_either_kind_of_agent() -> None:
    assert run_input("  hi ", "", graph=False) == ("hi", None)
    assert run_input("hi", "", graph=True) == ("hi", None)


def test_a_graph_gets_the_object_whole_and_the_conversation_a_text() -> None:
    body = {"messages": [{"role": "user", "content": "ping"}], "mode": "fast"}
    assert run_input("", json.dumps(body), graph=True) == ("ping", body)
    assert run_input("shown", json.dumps(body), graph=True) == ("shown", body)
    state = {"title": "disk full", "priority": 2}
    text, given = run_input("", json.dumps(state), graph=True)
    assert json.loads(text) == state and given == state  # no message: the input is shown


def test_a_native_agent_takes_the_last_user_message() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "first"},
            {"type": "human", "content": [{"type": "text", "text": "se"}, "cond"]},
            {"role": "assistant", "content": "ok"},
        ]
    }
    assert run_input("", json.dumps(body), graph=False) == ("second", None)
    assert user_text_of({"messages": "bare"}) == "bare"
    assert user_text_of({"messages": [{"role": "ai", "content": "x"}]}) == ""


@pytest.mark.parametrize(
    ("text", "body", "graph", "message"),
    [
        ("", "", True, "text or input_json is required"),
        ("   ", "", False, "text or input_json is required"),
        ("x" * (MAX_TEXT + 1), "", False, f"longer than {MAX_TEXT}"),
        ("", "[1]", True, "must be a JSON object"),
        ("", "{nope", True, "not valid JSON"),
        ("", "{}", False, "no user message"),
        ("", json.dumps({"messages": [{"role": "assistant", "content": "x"}]}), False, "no user"),
        ("", json.dumps({"k": "x" * MAX_INPUT_JSON}), True, "input_json is longer"),
    ],
)
def test_what_is_refused(text: str, body: str, graph: bool, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        run_input(text, body, graph=graph)
