"""The AI SDK view of a Tether run, without processes: the UI message stream parts each POST (a
stretch of the Tether run) streams and their ids, the whole run as GET .../stream replays it
(the same ids: a `Last-Event-ID` from either view is exact), and useChat's request checks."""

from __future__ import annotations

from typing import Any

import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.errors import InvalidArgument
from tether_gateway.aisdk.chat_request import chat_request
from tether_gateway.aisdk.parts import DONE, Part, UiRun
from tether_gateway.langgraph import ids

RUN = "run_1"
CONFIRM = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
SELECT = resources_pb2.INTERRUPT_KIND_SELECT_OPTION
CARD = resources_pb2.InterruptPayload(
    title="Restart web-1?", risk="high", tool="restart", target="web-1", parameter_summary="id=1"
)


def ev(seq: int, **kind: Any) -> events_pb2.RunEvent:
    out = events_pb2.RunEvent(run_id=RUN, sequence=seq)
    for name, value in kind.items():
        getattr(out, name).CopyFrom(value)
    return out


def text(seq: int, message_id: str, delta: str) -> events_pb2.RunEvent:
    return ev(seq, text_delta=events_pb2.TextDelta(message_id=message_id, delta=delta))


def log(
    decision: int = events_pb2.DECISION_APPROVED, kind: int = CONFIRM
) -> list[events_pb2.RunEvent]:
    """Text, a read tool's call, a write's approval card; answered: the write runs, text, done."""
    out = [
        ev(1, run_started=events_pb2.RunStarted(conversation_id="c1")),
        text(2, "m1", "Let me "),
        text(3, "m1", "check."),
        ev(4, tool_started=events_pb2.ToolStarted(call_id="c_1", tool="find", args_summary="x")),
        ev(
            5,
            tool_finished=events_pb2.ToolFinished(
                call_id="c_1", tool="find", status=events_pb2.TOOL_STATUS_SUCCESS, summary="found"
            ),
        ),
        ev(
            6,
            interrupt=events_pb2.InterruptRaised(
                interrupt_id="int_1", kind=kind, payload=CARD, call_id="c_2"
            ),
        ),
        ev(
            7,
            interrupt_resolved=events_pb2.InterruptResolved(
                interrupt_id="int_1", decision=decision
            ),
        ),
    ]
    if decision == events_pb2.DECISION_APPROVED:
        out += [
            ev(8, tool_started=events_pb2.ToolStarted(call_id="c_2", tool="restart")),
            ev(
                9,
                tool_finished=events_pb2.ToolFinished(
                    call_id="c_2",
                    tool="restart",
                    status=events_pb2.TOOL_STATUS_SUCCESS,
                    summary="ok",
                ),
            ),
        ]
    return out + [text(10, "m2", "Done."), ev(11, done=events_pb2.Done(message_id="m2"))]


def parts_of(
    first: int,
    last: int,
    after: ids.Cursor = ids.START,
    events: list[events_pb2.RunEvent] | None = None,
) -> tuple[list[Part], UiRun]:
    run = UiRun(run_id=RUN, first=first, last=last, after=after)
    out: list[Part] = []
    for e in events or log():
        out.extend(run.feed(e))
        if run.done:
            break
    return out, run


def kinds(parts: list[Part]) -> list[str]:
    return [p.part if isinstance(p.part, str) else p.part["type"] for p in parts]


def test_the_first_post_streams_up_to_the_approval_request() -> None:
    parts, run = parts_of(0, 0)
    assert run.done
    assert kinds(parts) == [
        "start", "start-step", "text-start", "text-delta", "text-delta", "text-end",
        "tool-input-start", "tool-input-available", "tool-output-available",
        "finish-step", "start-step", "tool-input-start", "tool-input-available",
        "tool-approval-request", "finish-step", "finish", DONE,
    ]  # fmt: skip
    assert parts[0].part == {"type": "start", "messageId": f"msg-{RUN}"}
    assert parts[7].part == {
        "type": "tool-input-available", "toolCallId": "c_1", "toolName": "find",
        "input": {"summary": "x"},
    }  # fmt: skip
    assert parts[13].part == {
        "type": "tool-approval-request",
        "approvalId": "int_1",
        "toolCallId": "c_2",
    }
    assert [p.id for p in parts[:3]] == ["1-0", "1-1", "2-0"]
    assert parts[-1].encode() == f"id: {parts[-1].id}\ndata: [DONE]\n\n".encode()


def test_the_answer_continues_the_same_message() -> None:
    parts, run = parts_of(1, 1)
    assert run.done
    assert kinds(parts) == [
        "start", "tool-approval-response", "tool-output-available",
        "finish-step", "start-step", "text-start", "text-delta", "text-end",
        "finish-step", "finish", DONE,
    ]  # fmt: skip
    assert parts[0].part == {"type": "start", "messageId": f"msg-{RUN}"}, "the same message"
    assert parts[1].part == {
        "type": "tool-approval-response",
        "approvalId": "int_1",
        "approved": True,
    }
    assert parts[2].part == {"type": "tool-output-available", "toolCallId": "c_2", "output": "ok"}


def test_a_rejection_is_a_denied_output() -> None:
    events = log(events_pb2.DECISION_REJECTED)
    refused = events_pb2.ToolFinished(
        call_id="c_2", tool="restart", status=events_pb2.TOOL_STATUS_ERROR, summary="not executed"
    )
    events.insert(7, ev(8, tool_finished=refused))  # a result for it, if one came, is not sent
    parts, _ = parts_of(1, 1, events=events)
    assert "tool-output-error" not in kinds(parts)
    assert kinds(parts)[:3] == ["start", "tool-approval-response", "tool-output-denied"]
    assert parts[2].part == {"type": "tool-output-denied", "toolCallId": "c_2"}


def test_the_whole_run_replay_is_one_message_with_the_posts_ids() -> None:
    """GET .../stream replays every stretch as one message: the earlier stretch's finish and
    [DONE] are left out; every other part has the id the POSTs gave it."""
    whole, run = parts_of(0, 1)
    assert run.done
    first, _ = parts_of(0, 0)
    second, _ = parts_of(1, 1)
    interrupt_end = [p for p in first if p.cursor[0] == 6 and kinds([p])[0] in ("finish", DONE)]
    assert len(interrupt_end) == 2
    assert [p for p in first + second if p not in interrupt_end] == whole
    assert kinds(whole).count("finish") == 1 and kinds(whole).count(DONE) == 1


@pytest.mark.parametrize("cut", range(0, 25))
def test_a_reconnect_after_any_part_is_exact(cut: int) -> None:
    whole, _ = parts_of(0, 1)
    if cut >= len(whole):
        return
    rest, _ = parts_of(0, 1, after=whole[cut].cursor)
    assert rest == whole[cut + 1 :]


def test_other_interrupts_are_data_parts_with_their_answer() -> None:
    parts, _ = parts_of(0, 0, events=log(kind=SELECT))
    data = [
        p.part
        for p in parts
        if isinstance(p.part, dict) and p.part["type"] == "data-tether-interrupt"
    ]
    assert len(data) == 1 and data[0]["id"] == "int_1"
    assert data[0]["data"]["reason"] == "select_option" and data[0]["data"]["toolCallId"] == "c_2"
    after, _ = parts_of(1, 1, events=log(kind=SELECT))
    assert isinstance(after[1].part, dict) and after[1].part["type"] == "data-tether-interrupt"
    assert after[1].part["id"] == "int_1" and after[1].part["data"]["answer"] == "approved"
    assert after[2].part == {
        "type": "tool-output-available", "toolCallId": "c_2", "output": {"answer": "approved"},
    }, "the question tool's part is complete"  # fmt: skip


def test_error_and_cancel_end_the_stream() -> None:
    events = [ev(1, run_started=events_pb2.RunStarted()), text(2, "m", "Hi"),
              ev(3, error=events_pb2.Error(code="X", message="the model failed"))]  # fmt: skip
    parts, run = parts_of(0, 0, events=events)
    assert run.done and kinds(parts)[-3:] == ["text-end", "error", DONE]
    assert parts[-2].part == {"type": "error", "errorText": "the model failed"}
    events[-1] = ev(3, cancelled=events_pb2.Cancelled(reason="user"))
    parts, _ = parts_of(0, 0, events=events)
    assert kinds(parts)[-2:] == ["abort", DONE]


def user(text: str, mid: str = "u1") -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def test_the_request_a_new_turn_and_an_approval() -> None:
    req = chat_request({"id": "chat1", "messages": [user("old"), user("restart web-1", "u2")],
                        "trigger": "submit-message"})  # fmt: skip
    assert (req.text, req.turn_id, req.answer) == ("restart web-1", "u2", None)
    again = chat_request({"id": "chat1", "messages": [user("restart web-1", "u2")]})
    assert again.run_input().run_id == req.run_input().run_id, "a retried turn is the same run"
    assistant = {"id": "msg-r", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-restart", "toolCallId": "c_2", "state": "approval-responded",
         "approval": {"id": "int_1", "approved": False, "reason": "no"}}]}  # fmt: skip
    req = chat_request({"id": "chat1", "messages": [user("x"), assistant], "messageId": "msg-r"})
    assert req.answer is not None and req.answer.interrupt_id == "int_1"
    assert req.answer.payload == {"decision": "reject"} and req.text == ""
    resume = {"resume": [{"interruptId": "int_9", "status": "resolved", "payload": {"value": "a"}}]}
    req = chat_request({"id": "chat1", "messages": [], "tether": resume})
    assert req.answer is not None and req.answer.interrupt_id == "int_9"


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([], "JSON object"),
        ({"messages": [user("x")]}, "id must be"),
        ({"id": "a/b", "messages": [user("x")]}, "id must be"),
        ({"id": "c", "messages": [user("x")], "trigger": "regenerate-message"}, "regenerated"),
        ({"id": "c", "messages": []}, "must end"),
        ({"id": "c", "messages": [user("  ")]}, "no text"),
        (
            {"id": "c", "messages": [{"id": "a", "role": "assistant", "parts": []}]},
            "approval-responded",
        ),
        ({"id": "c", "messages": [{"id": "a", "role": "system", "parts": []}]}, "last message"),
        ({"id": "c", "messages": [user("x")], "tether": {"resume": []}}, "one interrupt"),
        ({"id": "c", "messages": "x"}, "list of UI message"),
    ],
)
def test_bad_requests_are_refused(body: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        chat_request(body)
