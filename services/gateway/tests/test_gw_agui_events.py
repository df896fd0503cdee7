"""The AG-UI view of a Tether run, without processes: the events each AG-UI run (a stretch of the
Tether run) streams and their ids, the cursor a reconnect resumes after, the interrupts as AG-UI's
with a responseSchema per kind, `resume[]` entries as Tether's answers, and RunAgentInput's checks."""

from __future__ import annotations

from typing import Any

import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.errors import InvalidArgument
from tether_gateway.agui import interrupts, transcript
from tether_gateway.agui.events import AguiRun, Frame
from tether_gateway.agui.run_input import ResumeEntry, run_input
from tether_gateway.agui.run_start import stretch_after
from tether_gateway.agui.transcript import Transcript
from tether_gateway.langgraph import ids

RUN = "run_1"
CONFIRM = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION


def ev(seq: int, **kind: Any) -> events_pb2.RunEvent:
    out = events_pb2.RunEvent(run_id=RUN, sequence=seq)
    for name, value in kind.items():
        getattr(out, name).CopyFrom(value)
    return out


def text(seq: int, message_id: str, delta: str) -> events_pb2.RunEvent:
    return ev(seq, text_delta=events_pb2.TextDelta(message_id=message_id, delta=delta))


def finished(seq: int, call_id: str, summary: str = "ok") -> events_pb2.RunEvent:
    return ev(
        seq,
        tool_finished=events_pb2.ToolFinished(
            call_id=call_id, tool="restart", status=events_pb2.TOOL_STATUS_SUCCESS, summary=summary
        ),
    )


def resolved(seq: int, decision: int = events_pb2.DECISION_APPROVED) -> events_pb2.RunEvent:
    return ev(
        seq,
        interrupt_resolved=events_pb2.InterruptResolved(interrupt_id="int_1", decision=decision),
    )


CARD = resources_pb2.InterruptPayload(
    title="Restart web-1?", risk="high", tool="restart", target="web-1", parameter_summary="id=1"
)


def paused_then_resumed() -> list[events_pb2.RunEvent]:
    """Text, a read tool's call, an interrupt; approved: the write tool's call, text, done."""
    return [
        ev(1, run_started=events_pb2.RunStarted(conversation_id="c1")),
        text(2, "m1", "Let me "),
        text(3, "m1", "check."),
        ev(4, tool_started=events_pb2.ToolStarted(call_id="call_1", tool="find", args_summary="x")),
        ev(
            5,
            interrupt=events_pb2.InterruptRaised(interrupt_id="int_1", kind=CONFIRM, payload=CARD),
        ),
        resolved(6),
        ev(7, tool_progress=events_pb2.ToolProgress(call_id="call_2", fraction=0.5, text="half")),
        finished(8, "call_2"),
        text(9, "m2", ""),  # an empty delta sends nothing
        text(10, "m2", "Done."),
        ev(11, done=events_pb2.Done(message_id="m2")),
    ]


HISTORY = [{"id": "msg_1", "role": "user", "content": "restart web-1"}]


def events_of(
    stretch: int, after: ids.Cursor = ids.START, log: list[events_pb2.RunEvent] | None = None
) -> tuple[list[Frame], AguiRun]:
    run = AguiRun(
        thread_id="t1", run_id=f"client-{stretch}", stretch=stretch, after=after, history=HISTORY
    )
    out: list[Frame] = []
    for e in log if log is not None else paused_then_resumed():
        if run.snapshot_due(e):
            run.facts = {"service": "web"}
        out.extend(run.feed(e))
        if run.done:
            break
    return out, run


def types(frames: list[Frame]) -> list[str]:
    return [f.event["type"] for f in frames]


def test_the_first_run_ends_at_the_interrupt_with_everything_closed() -> None:
    frames, run = events_of(0)
    assert run.done
    assert types(frames) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    by_type = {f.event["type"]: f.event for f in frames}
    assert by_type["RUN_STARTED"] == {"type": "RUN_STARTED", "threadId": "t1", "runId": "client-0"}
    # The conversation as Tether stored it (the run's own user message last): it wins.
    assert by_type["MESSAGES_SNAPSHOT"]["messages"] == HISTORY
    assert by_type["TEXT_MESSAGE_START"] == {
        "type": "TEXT_MESSAGE_START",
        "messageId": "m1",
        "role": "assistant",
    }
    assert by_type["TOOL_CALL_START"] == {
        "type": "TOOL_CALL_START",
        "toolCallId": "call_1",
        "toolCallName": "find",
        "parentMessageId": "m1",
    }
    assert by_type["TOOL_CALL_ARGS"]["delta"] == '{"summary":"x"}'
    assert (
        by_type["STEP_STARTED"]["stepName"]
        == by_type["STEP_FINISHED"]["stepName"]
        == ("find:call_1")
    )
    assert by_type["STATE_SNAPSHOT"]["snapshot"] == {"facts": {"service": "web"}}
    done = by_type["RUN_FINISHED"]
    assert (done["threadId"], done["runId"]) == ("t1", "client-0")
    (raised,) = done["outcome"]["interrupts"]
    assert done["outcome"]["type"] == "interrupt"
    assert raised["id"] == "int_1" and raised["reason"] == "tool_approval"
    assert raised["message"] == "Restart web-1?"
    assert raised["metadata"]["tether"]["card"]["target"] == "web-1"
    # Ids: `{sequence}-{k}`, increasing, each its own.
    assert [f.id for f in frames] == [
        "1-0", "1-1", "2-0", "2-1", "3-0", "4-0", "4-1", "4-2", "4-3", "4-4", "5-0", "5-1", "5-2"
    ]  # fmt: skip
    assert all(f.encode().startswith(f"id: {f.id}\ndata: ".encode()) for f in frames)


def test_the_resumed_run_carries_the_result_of_the_approved_call() -> None:
    frames, run = events_of(1)
    assert run.done
    assert types(frames) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "CUSTOM",
        # The approved call was never announced before it ran: its START / ARGS / END come
        # before its result.
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert frames[0].id == "6-0" and frames[0].event["runId"] == "client-1"
    # The conversation so far: the stored history, then what the first AG-UI run streamed,
    # folded as the client folds it (the same ids the client holds).
    assert frames[1].event["messages"] == [
        *HISTORY,
        {
            "id": "m1",
            "role": "assistant",
            "content": "Let me check.",
            "toolCalls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "find", "arguments": '{"summary":"x"}'},
                }
            ],
        },
    ]
    assert frames[2].event == {
        "type": "CUSTOM",
        "name": "tether.tool_progress",
        "value": {"toolCallId": "call_2", "tool": "", "fraction": 0.5, "text": "half"},
    }
    assert frames[6].event == {
        "type": "TOOL_CALL_RESULT",
        "messageId": "call_2:result",
        "toolCallId": "call_2",
        "content": "ok",
        "role": "tool",
    }
    assert frames[-1].event["outcome"] == {"type": "success"}


def test_a_reconnect_gets_exactly_the_events_after_its_cursor() -> None:
    for stretch in (0, 1):
        whole, _ = events_of(stretch)
        for cut in range(len(whole) + 1):
            after = ids.cursor(whole[cut - 1].id) if cut else ids.START
            tail, run = events_of(stretch, after)
            assert [f.encode() for f in tail] == [f.encode() for f in whole[cut:]]
            assert run.done


def test_no_optional_field_is_ever_null() -> None:
    def nulls(value: Any) -> bool:
        if isinstance(value, dict):
            return any(v is None or nulls(v) for v in value.values())
        if isinstance(value, list):
            return any(v is None or nulls(v) for v in value)
        return False

    for stretch in (0, 1):
        frames, _ = events_of(stretch)
        assert not any(nulls(f.event) for f in frames)


def test_an_error_or_a_cancel_ends_the_run_with_what_was_open_closed() -> None:
    log = [
        ev(1, run_started=events_pb2.RunStarted(conversation_id="c1")),
        text(2, "m1", "Work"),
        ev(3, tool_started=events_pb2.ToolStarted(call_id="c", tool="t")),
        ev(4, error=events_pb2.Error(code="MODEL_FAILED", message="the model failed")),
        text(5, "m9", "never"),
    ]
    frames, run = events_of(0, log=log)
    assert run.done
    assert types(frames)[-3:] == ["TOOL_CALL_END", "STEP_FINISHED", "RUN_ERROR"]
    assert frames[-1].event == {
        "type": "RUN_ERROR",
        "message": "the model failed",
        "code": "MODEL_FAILED",
    }
    log[3] = ev(4, cancelled=events_pb2.Cancelled(reason="stop"))
    frames, _ = events_of(0, log=log)
    assert frames[-1].event["outcome"] == {"type": "cancelled"}
    assert "STATE_SNAPSHOT" not in types(frames)


def test_an_expired_interrupt_begins_no_run() -> None:
    log = [*paused_then_resumed()[:5], resolved(6, events_pb2.DECISION_EXPIRED)]
    log.append(ev(7, cancelled=events_pb2.Cancelled(reason="expired")))
    frames, run = events_of(1, log=log)
    assert frames == [] and not run.done
    assert stretch_after(paused_then_resumed(), "int_1") == 1
    with pytest.raises(Exception, match="began no run"):
        stretch_after(log, "int_1")


def test_each_interrupt_kind_has_its_response_schema() -> None:
    confirm = interrupts.response_schema(CONFIRM, CARD)
    assert confirm is not None
    assert confirm["properties"]["decision"]["enum"] == ["approve", "reject"]
    select = resources_pb2.InterruptPayload(
        options=[
            resources_pb2.InterruptOption(value="a", label="A", description="the first"),
            resources_pb2.InterruptOption(value="b"),
        ]
    )
    schema = interrupts.response_schema(resources_pb2.INTERRUPT_KIND_SELECT_OPTION, select)
    assert schema is not None
    assert schema["properties"]["value"]["oneOf"] == [
        {"const": "a", "title": "A", "description": "the first"},
        {"const": "b", "title": "b"},
    ]
    form = resources_pb2.InterruptPayload(input_schema_json='{"type":"object","required":["n"]}')
    assert interrupts.response_schema(resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT, form) == {
        "type": "object",
        "required": ["n"],
    }
    unknown = interrupts.response_schema(resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, CARD)
    assert unknown is not None
    assert unknown["properties"]["decision"]["enum"] == ["retry", "mark_done", "abandon"]
    graph = resources_pb2.InterruptPayload(value_json='{"question": "which?"}')
    assert interrupts.response_schema(resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT, graph) is None
    raised = interrupts.interrupt_json(
        events_pb2.InterruptRaised(
            interrupt_id="int_9", kind=resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, payload=CARD
        )
    )
    assert raised["reason"] == "outcome_unknown" and "expiresAt" not in raised


def _interrupt(kind: int, **payload: Any) -> resources_pb2.Interrupt:
    return resources_pb2.Interrupt(
        id="int_1", run_id=RUN, kind=kind, payload=resources_pb2.InterruptPayload(**payload)
    )


@pytest.mark.parametrize(
    ("kind", "status", "payload", "decision", "given"),
    [
        (CONFIRM, "resolved", {"decision": "approve"}, events_pb2.DECISION_APPROVED, ""),
        (CONFIRM, "resolved", {"decision": "reject"}, events_pb2.DECISION_REJECTED, ""),
        (CONFIRM, "resolved", True, events_pb2.DECISION_APPROVED, ""),
        (CONFIRM, "cancelled", None, events_pb2.DECISION_REJECTED, ""),
        (
            resources_pb2.INTERRUPT_KIND_SELECT_OPTION,
            "resolved",
            {"value": "b"},
            events_pb2.DECISION_RESPONDED,
            "b",
        ),
        (
            resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT,
            "resolved",
            {"replicas": 3},
            events_pb2.DECISION_RESPONDED,
            '{"replicas":3}',
        ),
        (
            resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN,
            "resolved",
            {"decision": "mark_done"},
            events_pb2.DECISION_MARK_DONE,
            "",
        ),
    ],
)
def test_resume_entries_become_tethers_answers(
    kind: int, status: str, payload: Any, decision: int, given: str
) -> None:
    ans = interrupts.answer(_interrupt(kind), ResumeEntry("int_1", status, payload))
    assert (ans.decision, ans.input) == (decision, given)


def test_answers_that_do_not_fit_are_refused() -> None:
    select = _interrupt(resources_pb2.INTERRUPT_KIND_SELECT_OPTION)
    for entry in (
        ResumeEntry("int_1", "cancelled", None),  # a question has no declining answer
        ResumeEntry("int_1", "resolved", None),  # no payload
        ResumeEntry("int_1", "resolved", {"value": 3}),
    ):
        with pytest.raises(InvalidArgument):
            interrupts.answer(select, entry)
    with pytest.raises(InvalidArgument):
        interrupts.answer(
            _interrupt(resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN),
            ResumeEntry("int_1", "resolved", {"decision": "maybe"}),
        )


def test_the_same_answer_however_spelled_is_one_idempotency_key() -> None:
    confirm = _interrupt(CONFIRM)
    keys = {
        interrupts.idempotency_key("c1", "int_1", interrupts.answer(confirm, entry))
        for entry in (
            ResumeEntry("int_1", "resolved", {"decision": "approve"}),
            ResumeEntry("int_1", "resolved", True),
            ResumeEntry("int_1", "resolved", "approve"),
        )
    }
    assert len(keys) == 1 and len(keys.pop()) <= 128
    reject = interrupts.answer(confirm, ResumeEntry("int_1", "cancelled", None))
    approve = interrupts.answer(confirm, ResumeEntry("int_1", "resolved", True))
    assert interrupts.idempotency_key("c1", "int_1", reject) != interrupts.idempotency_key(
        "c1", "int_1", approve
    )


def _body(**over: Any) -> dict[str, Any]:
    base = {
        "threadId": "t-1",
        "runId": "r-1",
        "messages": [{"id": "1", "role": "user", "content": "hi"}],
    }
    return base | over


def test_run_agent_input_is_read_and_checked() -> None:
    parts = [{"type": "text", "text": "restart "}, {"type": "text", "text": "web"}]
    inp = run_input(
        _body(
            messages=[
                {"id": "0", "role": "assistant", "content": "earlier"},
                {"id": "1", "role": "user", "content": parts},
            ],
            tools=[{"name": "x", "description": "a frontend tool"}],
            state={"anything": 1},
            forwardedProps={"tether": {"title": "Ops"}, "other": True},
        )
    )
    assert (inp.thread_id, inp.run_id, inp.text, inp.title, inp.resume) == (
        "t-1",
        "r-1",
        "restart web",
        "Ops",
        (),
    )
    resumed = run_input(
        _body(messages=[], resume=[{"interruptId": "int_1", "status": "resolved", "payload": 1}])
    )
    assert resumed.text == "" and resumed.resume == (ResumeEntry("int_1", "resolved", 1),)
    for bad in (
        [],
        _body(threadId=""),
        _body(runId="a b"),
        _body(runId="x" * 121),
        _body(messages=[{"id": "1", "role": "user", "content": "  "}]),
        _body(messages="hi"),
        _body(forwardedProps=[]),
        _body(resume=[{"interruptId": "i", "status": "resolved"}] * 2),
        _body(resume=[{"status": "resolved"}]),
    ):
        with pytest.raises(InvalidArgument):
            run_input(bad)


def test_the_transcript_folds_events_as_the_client_does() -> None:
    stored = resources_pb2.Message(
        id="msg_2", role=resources_pb2.MESSAGE_ROLE_TOOL, content="ok", tool_call_id="c0"
    )
    t = Transcript([transcript.stored(stored)])
    for event in (
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "find"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c1"},
        {"type": "TOOL_CALL_RESULT", "messageId": "c1:result", "toolCallId": "c1", "content": "1"},
    ):
        t.apply(event)
    assert t.snapshot() == [
        {"id": "msg_2", "role": "tool", "content": "ok", "toolCallId": "c0"},
        {
            "id": "c1",
            "role": "assistant",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}
            ],
        },
        {"id": "c1:result", "role": "tool", "content": "1", "toolCallId": "c1"},
    ]
    snap = t.snapshot()
    snap[1]["toolCalls"][0]["function"]["arguments"] = "changed"
    assert t.snapshot()[1]["toolCalls"][0]["function"]["arguments"] == "{}", "a copy"


def test_a_gated_call_is_streamed_with_its_card_and_its_result_after_the_answer() -> None:
    """AG-UI's approval pattern: the call the card is about, without a result, then the
    interrupt naming it (toolCallId); the run that resumes carries its result."""
    log = [
        ev(1, run_started=events_pb2.RunStarted(conversation_id="c1")),
        text(2, "m1", "Restarting."),
        ev(
            3,
            interrupt=events_pb2.InterruptRaised(
                interrupt_id="int_1", kind=CONFIRM, payload=CARD, call_id="call_w"
            ),
        ),
        resolved(4),
        ev(5, tool_started=events_pb2.ToolStarted(call_id="call_w", tool="restart")),
        finished(6, "call_w", "restarted"),
        ev(7, done=events_pb2.Done(message_id="m1")),
    ]
    first, _ = events_of(0, log=log)
    assert types(first) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    start = first[5].event
    assert start == {
        "type": "TOOL_CALL_START",
        "toolCallId": "call_w",
        "toolCallName": "restart",
        "parentMessageId": "m1",
    }
    assert first[6].event["delta"] == '{"summary":"id=1"}'
    (raised,) = first[-1].event["outcome"]["interrupts"]
    assert raised["toolCallId"] == "call_w"
    resumed, _ = events_of(1, log=log)
    assert types(resumed) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STEP_STARTED",  # no second TOOL_CALL_START: the client has the call
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert resumed[3].event["toolCallId"] == "call_w"
    # The snapshot holds the call under the text message it followed, as the client folded it.
    (_, message) = resumed[1].event["messages"]
    assert message["id"] == "m1" and message["toolCalls"][0]["id"] == "call_w"
