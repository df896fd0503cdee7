"""The LangGraph view of a Tether run, without processes: stretches (one LangGraph run per pause),
the frames each stretch streams and their ids, the cursor a join resumes after, the resume
value's mapping to an answer, and a run request's checks."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.errors import InvalidArgument
from tether_gateway.langgraph import answers, ids, messages, views
from tether_gateway.langgraph.frames import Frame, StretchFrames
from tether_gateway.langgraph.run_request import input_text, query_modes, run_request
from tether_gateway.langgraph.stretches import stretches
from tether_gateway.langgraph.thread_state import ThreadValues

RUN = "run_1"
ALL = frozenset({"values", "updates", "messages-tuple", "messages", "custom"})


def ev(seq: int, **kind: Any) -> events_pb2.RunEvent:
    out = events_pb2.RunEvent(run_id=RUN, sequence=seq)
    for name, value in kind.items():
        getattr(out, name).CopyFrom(value)
    return out


def paused_then_resumed() -> list[events_pb2.RunEvent]:
    """Text, a tool call, an interrupt; approved: the tool's result, text, done."""
    card = resources_pb2.InterruptPayload(title="Restart web-1?", risk="high", tool="restart")
    return [
        ev(1, run_started=events_pb2.RunStarted(conversation_id="c1")),
        ev(2, text_delta=events_pb2.TextDelta(message_id="m1", delta="Let me ")),
        ev(3, text_delta=events_pb2.TextDelta(message_id="m1", delta="check.")),
        ev(4, tool_started=events_pb2.ToolStarted(call_id="call_1", tool="restart")),
        ev(
            5,
            interrupt=events_pb2.InterruptRaised(
                interrupt_id="int_1", kind=resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION, payload=card
            ),
        ),
        ev(
            6,
            interrupt_resolved=events_pb2.InterruptResolved(
                interrupt_id="int_1", decision=events_pb2.DECISION_APPROVED
            ),
        ),
        ev(7, tool_progress=events_pb2.ToolProgress(call_id="call_1", fraction=0.5, text="half")),
        ev(
            8,
            tool_finished=events_pb2.ToolFinished(
                call_id="call_1",
                tool="restart",
                status=events_pb2.TOOL_STATUS_SUCCESS,
                summary="ok",
            ),
        ),
        ev(9, text_delta=events_pb2.TextDelta(message_id="m2", delta="Done.")),
        ev(10, done=events_pb2.Done(message_id="m2")),
    ]


def frames_of(
    stretch: int, modes: frozenset[str] = ALL, after: ids.Cursor = ids.START
) -> tuple[list[Frame], StretchFrames]:
    conv = StretchFrames(
        thread_id="t1",
        tether_run_id=RUN,
        stretch=stretch,
        history=[{"type": "human", "content": "restart web"}],
        modes=modes,
        after=after,
    )
    out: list[Frame] = []
    for e in paused_then_resumed():
        out.extend(conv.feed(e))
        if conv.done:
            break
    return out, conv


def test_a_run_paused_once_is_two_langgraph_runs() -> None:
    found = stretches(paused_then_resumed())
    assert [(s.index, s.first, s.last, s.end) for s in found] == [
        (0, 1, 5, "interrupt"),
        (1, 6, 10, "done"),
    ]
    run = resources_pb2.Run(status=resources_pb2.RUN_STATUS_COMPLETED)
    assert [s.status(run) for s in found] == ["success", "success"]
    assert ids.stretch_run_id(RUN, 0) == RUN
    second = ids.stretch_run_id(RUN, 1)
    assert second != RUN and ids.stretch_of(RUN, second, most=10) == 1
    assert ids.stretch_of(RUN, "someone-else", most=10) is None


def test_only_a_uuid5_is_looked_for_among_a_runs_later_stretches() -> None:
    # A join of an older run by its own id meets the thread's newer runs first: a Tether run id
    # is never one of their stretches, whatever their length (no uuid5 per event of each).
    assert ids.stretch_of("run_newer", RUN, most=10**9) is None
    later = ids.stretch_run_id("run_newer", 3)
    assert ids.stretch_of("run_newer", later, most=10**9) == 3
    assert ids.stretch_of("run_newer", later.upper(), most=10) is None  # not an id we gave


def test_an_open_stretch_takes_the_run_status() -> None:
    [only] = stretches(paused_then_resumed()[:3])
    assert only.end == ""
    assert only.status(resources_pb2.Run(status=resources_pb2.RUN_STATUS_RUNNING)) == "running"
    assert only.status(resources_pb2.Run(status=resources_pb2.RUN_STATUS_QUEUED)) == "pending"


def test_an_expired_question_starts_no_new_stretch() -> None:
    log = paused_then_resumed()[:5] + [
        ev(
            6,
            interrupt_resolved=events_pb2.InterruptResolved(
                interrupt_id="int_1", decision=events_pb2.DECISION_EXPIRED
            ),
        ),
        ev(7, error=events_pb2.Error(code="INTERRUPT_UNANSWERED", message="expired")),
    ]
    assert [(s.index, s.end) for s in stretches(log)] == [(0, "interrupt")]


def test_first_stretch_ends_at_the_interrupt_with_its_value() -> None:
    out, conv = frames_of(0)
    assert conv.done
    assert [f.event for f in out] == [
        "metadata",
        "values",
        "messages",
        "messages/metadata",
        "messages/partial",
        "messages",
        "messages/partial",
        "messages/complete",
        "updates",
        "values",
        "updates",
        "values",
    ]
    assert out[0].data == {"run_id": RUN, "attempt": 1}
    agent = out[8].data["agent"]["messages"][0]
    assert agent["content"] == "Let me check." and agent["tool_calls"][0]["id"] == "call_1"
    interrupt = out[10].data["__interrupt__"][0]
    assert interrupt["value"] == {
        "kind": "confirm_action",
        "title": "Restart web-1?",
        "risk": "high",
        "tool": "restart",
    }
    assert len(interrupt["id"]) == 32
    assert out[-1].data["__interrupt__"] == [interrupt]
    assert [m["type"] for m in out[-1].data["messages"]] == ["human", "ai"]


def test_second_stretch_opens_with_metadata_and_carries_the_state() -> None:
    out, conv = frames_of(1)
    assert conv.done
    assert out[0].event == "metadata"
    assert out[0].data["run_id"] == ids.stretch_run_id(RUN, 1)
    assert {"progress": 0.5, "text": "half"} in [f.data for f in out if f.event == "custom"]
    tools = [f.data["tools"] for f in out if f.event == "updates" and "tools" in f.data]
    assert tools[0]["messages"][0]["tool_call_id"] == "call_1"
    final = out[-1]
    assert final.event == "values" and "__interrupt__" not in final.data
    assert [m["type"] for m in final.data["messages"]] == ["human", "ai", "tool", "ai"]
    assert final.data["messages"][-1]["content"] == "Done."


def test_ids_are_unique_and_every_cut_replays_the_exact_tail() -> None:
    for stretch in (0, 1):
        full, _ = frames_of(stretch)
        wire = [f.encode() for f in full]
        assert len({f.cursor for f in full}) == len(full)
        for cut in range(len(full) + 1):
            after = ids.START if cut == 0 else ids.cursor(ids.event_id(*full[cut - 1].cursor))
            tail, _ = frames_of(stretch, after=after)
            assert [f.encode() for f in tail] == wire[cut:]


def test_modes_filter_without_changing_ids() -> None:
    full, _ = frames_of(0)
    only, _ = frames_of(0, modes=frozenset({"updates"}))
    assert [f.event for f in only] == ["metadata", "updates", "updates"]
    assert {f.cursor for f in only} <= {f.cursor for f in full}


def test_frame_wire_format() -> None:
    frame = Frame((12, 3), "values", {"messages": []})
    assert frame.encode() == b'event: values\ndata: {"messages":[]}\nid: 12-3\n\n'
    assert orjson.loads(frame.encode().split(b"\n")[1][6:]) == {"messages": []}


@pytest.mark.parametrize(
    ("raw", "cursor"),
    [(None, ids.START), ("", ids.START), ("0", ids.START), ("-1", ids.START), ("12-3", (12, 3))],
)
def test_cursor(raw: str | None, cursor: ids.Cursor) -> None:
    assert ids.cursor(raw) == cursor


@pytest.mark.parametrize("raw", ["x", "1-", "-2", "1-2-3", "9" * 40])
def test_a_cursor_this_gateway_never_sent_is_refused(raw: str) -> None:
    with pytest.raises(InvalidArgument):
        ids.cursor(raw)


@pytest.mark.parametrize(
    ("values", "modes"),
    [
        ([], []),
        ([""], []),
        (["values", "updates"], ["values", "updates"]),
        (['["values","messages-tuple"]'], ["values", "messages-tuple"]),
    ],
)
def test_join_query_modes_repeated_or_a_json_list(values: list[str], modes: list[str]) -> None:
    assert query_modes(values) == modes


@pytest.mark.parametrize("value", ["[values", '["values", 1]', '[{"a": 1}]'])
def test_join_query_modes_that_are_no_list_are_refused(value: str) -> None:
    with pytest.raises(InvalidArgument):
        query_modes([value])


def interrupt(kind: int) -> resources_pb2.Interrupt:
    return resources_pb2.Interrupt(id="int_1", kind=kind)


CONFIRM = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION


@pytest.mark.parametrize(
    ("kind", "value", "decision", "text"),
    [
        (CONFIRM, True, events_pb2.DECISION_APPROVED, ""),
        (CONFIRM, False, events_pb2.DECISION_REJECTED, ""),
        (CONFIRM, {"approved": True}, events_pb2.DECISION_APPROVED, ""),
        (CONFIRM, "reject", events_pb2.DECISION_REJECTED, ""),
        (resources_pb2.INTERRUPT_KIND_SELECT_OPTION, "b", events_pb2.DECISION_RESPONDED, "b"),
        (
            resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT,
            {"n": 2},
            events_pb2.DECISION_RESPONDED,
            '{"n":2}',
        ),
        (
            resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT,
            "hi",
            events_pb2.DECISION_RESPONDED,
            '{"text":"hi"}',
        ),
        (resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, "retry", events_pb2.DECISION_RETRY, ""),
    ],
)
def test_resume_values(kind: int, value: Any, decision: int, text: str) -> None:
    assert answers.answer(interrupt(kind), value) == answers.Answer(decision, text)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (CONFIRM, "maybe"),
        (CONFIRM, 2),
        (resources_pb2.INTERRUPT_KIND_SELECT_OPTION, 1),
        (resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT, 3),
        (resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, "again"),
    ],
)
def test_resume_values_of_the_wrong_kind_are_refused(kind: int, value: Any) -> None:
    with pytest.raises(InvalidArgument):
        answers.answer(interrupt(kind), value)


def test_a_doubled_resume_is_one_key() -> None:
    key = answers.idempotency_key("t1", "int_1", {"a": 1, "b": 2})
    assert key == answers.idempotency_key("t1", "int_1", {"b": 2, "a": 1})
    assert key != answers.idempotency_key("t1", "int_1", {"a": 2, "b": 2})
    assert key != answers.idempotency_key("t1", "int_2", {"a": 1, "b": 2})
    assert len(key) <= 128


def test_input_text_is_the_last_human_message() -> None:
    data = {
        "messages": [
            {"role": "user", "content": "first"},
            {"type": "ai", "content": "answer"},
            ["human", [{"type": "text", "text": "second"}, {"type": "image_url"}]],
        ]
    }
    assert input_text(data) == "second"
    for bad in (None, {}, {"messages": [{"role": "ai", "content": "x"}]}, {"messages": "x"}):
        with pytest.raises(InvalidArgument):
            input_text(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "body",
    [
        [],
        {},
        {"assistant_id": 3},
        {"assistant_id": "a", "input": "text"},
        {"assistant_id": "a", "command": {"goto": "x"}},
        {"assistant_id": "a", "stream_mode": ["values", "telepathy"]},
        {"assistant_id": "a", "multitask_strategy": "sometimes"},
        {"assistant_id": "a", "checkpoint_id": "c1"},
        {"assistant_id": "a", "interrupt_before": ["x"]},
    ],
)
def test_run_requests_tether_cannot_honour_are_refused(body: Any) -> None:
    with pytest.raises(InvalidArgument):
        run_request(body)


def test_run_request_defaults() -> None:
    req = run_request({"assistant_id": "opspilot", "command": {"resume": None}})
    assert req.has_resume and req.resume is None
    assert req.stream_mode == frozenset({"values"})
    assert (req.multitask_strategy, req.on_disconnect) == ("enqueue", "continue")


def graph_run() -> list[events_pb2.RunEvent]:
    """A graph agent's run as the runtime streams it: LangGraph's own values, updates and custom
    data beside Tether's events, an interrupt carrying the graph's value whole."""
    value = {"question": "Restart?", "args": {"service": "web"}}
    card = resources_pb2.InterruptPayload(title="Restart?", value_json=orjson.dumps(value).decode())
    state = {"messages": [{"type": "human", "content": "go"}], "step": 1}
    return [
        ev(1, run_started=events_pb2.RunStarted(conversation_id="c1")),
        ev(2, graph_values=events_pb2.GraphValues(values_json=orjson.dumps(state).decode())),
        ev(3, tool_started=events_pb2.ToolStarted(call_id="call_1", tool="status")),
        ev(4, custom_data=events_pb2.CustomData(data_json='{"progress": 0.5, "text": "half"}')),
        ev(5, tool_progress=events_pb2.ToolProgress(call_id="call_1", fraction=0.5, text="half")),
        ev(6, graph_update=events_pb2.GraphUpdate(node="check", update_json='{"step": 2}')),
        ev(7, graph_values=events_pb2.GraphValues(values_json='{"messages": [], "step": 2}')),
        ev(
            8,
            interrupt=events_pb2.InterruptRaised(
                interrupt_id="int_1", kind=resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT, payload=card
            ),
        ),
    ]


def test_a_graph_run_streams_its_own_values_updates_and_custom_data() -> None:
    conv = StretchFrames(
        thread_id="t1", tether_run_id=RUN, stretch=0, history=[], modes=ALL, graph=True
    )
    out = [f for e in graph_run() for f in conv.feed(e)]
    assert conv.done
    assert [(f.event, f.data) for f in out[:5]] == [
        ("metadata", {"run_id": RUN, "attempt": 1}),
        ("values", {"messages": [{"type": "human", "content": "go"}], "step": 1}),
        ("custom", {"progress": 0.5, "text": "half"}),
        ("updates", {"check": {"step": 2}}),
        ("values", {"messages": [], "step": 2}),
    ]
    interrupt = out[5].data["__interrupt__"][0]
    assert interrupt["value"] == {"question": "Restart?", "args": {"service": "web"}}
    assert out[6].data == {"messages": [], "step": 2, "__interrupt__": [interrupt]}
    assert len(out) == 7, "Tether's tool events add nothing to a graph's own stream"


def test_a_graph_run_needs_the_threads_messages_only_when_its_log_has_no_state_yet() -> None:
    def frames(history: list[dict[str, Any]] | None) -> StretchFrames:
        return StretchFrames(
            thread_id="t1", tether_run_id=RUN, stretch=0, history=history, modes=ALL, graph=True
        )

    # Its state comes first in its log: the same frames as with the messages read, none asked.
    lazy, eager = frames(None), frames([{"type": "human", "content": "before"}])
    for e in graph_run():
        assert not lazy.needs_history(e)
        assert [(f.event, f.data, f.cursor) for f in lazy.feed(e)] == [
            (f.event, f.data, f.cursor) for f in eager.feed(e)
        ]
    assert not lazy.needs_history(None) and lazy.values() == eager.values()

    # An interrupt (or the end) before any state: the messages are asked for, then used.
    early = [graph_run()[0], graph_run()[-1]]
    lazy, eager = frames(None), frames([{"type": "human", "content": "before"}])
    assert not lazy.needs_history(early[0])
    lazy.feed(early[0])
    assert lazy.needs_history(early[1]) and lazy.needs_history(None)
    with pytest.raises(RuntimeError, match="needs_history"):
        lazy.values()
    lazy.set_history([{"type": "human", "content": "before"}])
    eager.feed(early[0])
    assert lazy.feed(early[1]) == eager.feed(early[1])
    assert lazy.values() == eager.values()
    assert lazy.values()["messages"] == [{"type": "human", "content": "before"}]
    with pytest.raises(ValueError, match="native"):
        StretchFrames(thread_id="t1", tether_run_id=RUN, stretch=0, history=None, modes=ALL)


def test_a_graph_interrupt_is_resumed_with_the_exact_value() -> None:
    graph = resources_pb2.Interrupt(
        id="int_1",
        kind=resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT,
        payload=resources_pb2.InterruptPayload(value_json='{"q": 1}'),
    )
    assert answers.answer(graph, [1, "two"]) == answers.Answer(
        events_pb2.DECISION_RESPONDED, value_json='[1,"two"]'
    )
    confirm = resources_pb2.Interrupt(
        id="int_2", kind=CONFIRM, payload=resources_pb2.InterruptPayload(value_json='"ok?"')
    )
    # True / False stay approve / reject: the runtime checks the approver's grant.
    assert answers.answer(confirm, True) == answers.Answer(events_pb2.DECISION_APPROVED)
    assert answers.answer(confirm, {"type": "accept"}).value_json == '{"type":"accept"}'
    with pytest.raises(InvalidArgument):
        answers.answer(graph, float("nan"))


def test_a_graph_runs_second_stretch_opens_with_the_state_it_continues_from() -> None:
    """The runtime sends a step's state once (not again when the graph continues after a pause):
    the resumed LangGraph run opens with it, as LangGraph's does, without the interrupt."""
    resumed = [
        *graph_run(),
        ev(
            9,
            interrupt_resolved=events_pb2.InterruptResolved(
                interrupt_id="int_1", decision=events_pb2.DECISION_RESPONDED
            ),
        ),
        ev(10, graph_update=events_pb2.GraphUpdate(node="ask", update_json='{"a": 1}', step=3)),
        ev(11, graph_values=events_pb2.GraphValues(values_json='{"a": 1}', step=3)),
        ev(12, done=events_pb2.Done(message_id="m", output_json='{"a": 1}')),
    ]
    conv = StretchFrames(
        thread_id="t1", tether_run_id=RUN, stretch=1, history=[], modes=ALL, graph=True
    )
    out = [f for e in resumed for f in conv.feed(e)]
    assert conv.done
    assert [(f.event, f.data) for f in out] == [
        ("metadata", {"run_id": ids.stretch_run_id(RUN, 1), "attempt": 1}),
        ("values", {"messages": [], "step": 2}),
        ("updates", {"ask": {"a": 1}}),
        ("values", {"a": 1}),
    ]
    assert [f.cursor for f in out] == [(9, 0), (9, 1), (10, 0), (11, 0)]


def graph_frames(events: list[events_pb2.RunEvent]) -> tuple[list[Frame], StretchFrames]:
    conv = StretchFrames(
        thread_id="t1", tether_run_id=RUN, stretch=0, history=[], modes=ALL, graph=True
    )
    return [f for e in events for f in conv.feed(e)], conv


def test_a_graph_chunk_carries_the_graphs_message_id_and_node() -> None:
    """As LangGraph streams it: the chunk's id is the message's id in the state, its metadata the
    node that streamed it and the node's checkpoint namespace; without them (an older log), the
    native mapping's."""
    delta = events_pb2.TextDelta(
        message_id="msg_1",
        delta="Hi",
        graph_message_id="lc_run--1",
        graph_node="model",
        graph_namespace="model:abc",
    )
    out, _ = graph_frames([ev(1, run_started=events_pb2.RunStarted()), ev(2, text_delta=delta)])
    [chunk] = [f.data for f in out if f.event == "messages"]
    assert chunk[0]["id"] == "lc_run--1" and chunk[0]["content"] == "Hi"
    assert chunk[1]["langgraph_node"] == "model"
    assert chunk[1]["langgraph_checkpoint_ns"] == chunk[1]["checkpoint_ns"] == "model:abc"
    old = events_pb2.TextDelta(message_id="msg_1", delta="Hi")
    out, _ = graph_frames([ev(1, run_started=events_pb2.RunStarted()), ev(2, text_delta=old)])
    [chunk] = [f.data for f in out if f.event == "messages"]
    assert chunk[0]["id"] == "msg_1" and chunk[1]["langgraph_node"] == "agent"
    assert "checkpoint_ns" not in chunk[1]


def test_a_message_a_node_returns_unstreamed_is_sent_whole_once() -> None:
    """LangGraph's `messages` mode: a node's returned message that was neither streamed nor in
    the state (the tools node's result) goes out whole with its node; a streamed one, or one the
    state has (a middleware writing the AI message again), does not."""
    human = {"type": "human", "content": "go", "id": "h1"}
    ai = {"type": "ai", "content": "Hi", "id": "lc_run--1"}
    result = {"type": "tool", "content": "sent", "id": "t1", "tool_call_id": "c1"}
    update = orjson.dumps({"messages": [ai]}).decode()
    out, _ = graph_frames(
        [
            ev(1, run_started=events_pb2.RunStarted()),
            ev(
                2,
                graph_values=events_pb2.GraphValues(
                    values_json=orjson.dumps({"messages": [human]}).decode()
                ),
            ),
            ev(
                3,
                text_delta=events_pb2.TextDelta(
                    delta="Hi", graph_message_id="lc_run--1", graph_node="model"
                ),
            ),
            ev(4, graph_update=events_pb2.GraphUpdate(node="model", update_json=update)),
            ev(5, graph_update=events_pb2.GraphUpdate(node="hitl", update_json=update)),
            ev(
                6,
                graph_update=events_pb2.GraphUpdate(
                    node="echo",
                    update_json='{"messages": [{"type": "human", "content": "go", "id": "h1"}]}',
                ),
            ),
            ev(
                7,
                graph_update=events_pb2.GraphUpdate(
                    node="tools", update_json=orjson.dumps({"messages": [result]}).decode()
                ),
            ),
            ev(
                8,
                graph_update=events_pb2.GraphUpdate(
                    node="tools", update_json=orjson.dumps([{"messages": result}]).decode()
                ),
            ),
        ]
    )
    said = [(f.data[0]["id"], f.data[1]["langgraph_node"]) for f in out if f.event == "messages"]
    assert said == [("lc_run--1", "model"), ("t1", "tools")]
    [whole] = [f.data[0] for f in out if f.event == "messages" and f.data[0]["id"] == "t1"]
    assert whole == result


def test_a_graph_state_that_is_no_dict() -> None:
    """An @entrypoint's state (its value) may be None: sent as it is; at an interrupt the
    interrupts alone."""
    card = resources_pb2.InterruptPayload(value_json='"ok?"')
    out, conv = graph_frames(
        [
            ev(1, run_started=events_pb2.RunStarted()),
            ev(2, graph_values=events_pb2.GraphValues(values_json="null")),
            ev(
                3,
                interrupt=events_pb2.InterruptRaised(
                    interrupt_id="int_1", kind=CONFIRM, payload=card
                ),
            ),
        ]
    )
    values = [f.data for f in out if f.event == "values"]
    assert values[0] is None
    assert values[1] == {"__interrupt__": [{"value": "ok?", "id": messages.interrupt_id("int_1")}]}
    out, conv = graph_frames(
        [
            ev(1, run_started=events_pb2.RunStarted()),
            ev(2, graph_values=events_pb2.GraphValues(values_json="null")),
            ev(3, done=events_pb2.Done(output_json="null")),
        ]
    )
    assert conv.done and conv.values() is None


def test_the_state_at_a_graph_interrupt_names_its_nodes() -> None:
    """`next` and `tasks` as LangGraph's: the nodes a resume runs, the one that asked holding
    the interrupt; a native agent's interrupt is its `agent` node's."""
    raised = [{"value": "ok?", "id": "i" * 32}]
    hitl = "HumanInTheLoopMiddleware.after_model"
    graph = views.state_json("t1", ThreadValues({}, raised, hitl, ["side", hitl]), None)
    assert graph["next"] == ["side", hitl]
    assert [(t["name"], t["interrupts"]) for t in graph["tasks"]] == [("side", []), (hitl, raised)]
    assert graph["tasks"][1]["id"] == raised[0]["id"] != graph["tasks"][0]["id"]
    native = views.state_json("t1", ThreadValues({"messages": []}, raised), None)
    assert native["next"] == ["agent"] and native["tasks"][0]["interrupts"] == raised
    done = views.state_json("t1", ThreadValues(None), None)
    assert done["next"] == [] and done["tasks"] == [] and done["values"] is None
