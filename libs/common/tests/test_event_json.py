"""The browser JSON of events: the hand-written fast paths must say exactly what protobuf would."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_common.event_json import (
    decision_name,
    interrupt_json,
    run_json,
    sse_frame,
    timestamp_json,
)

MAX_SECONDS = 253402300799  # 9999-12-31T23:59:59Z, protobuf's upper bound
MIN_SECONDS = -62135596800  # 0001-01-01T00:00:00Z


def test_timestamp_json_is_protobufs_to_json_string() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(50_000):
        seconds = rng.choice(
            [rng.randint(MIN_SECONDS, MAX_SECONDS), 1_764_500_000 + rng.randint(0, 60), 0]
        )
        nanos = rng.choice(
            [
                0,
                rng.randint(0, 999) * 1_000_000,
                rng.randint(0, 999_999) * 1_000,
                rng.randint(0, 999_999_999),
            ]
        )
        ts = Timestamp(seconds=seconds, nanos=nanos)
        if seconds == 0 and nanos == 0:
            assert timestamp_json(ts) is None  # unset
            continue
        assert timestamp_json(ts) == ts.ToJsonString(), (seconds, nanos)
        checked += 1
    assert checked > 40_000
    for seconds in (MIN_SECONDS, MAX_SECONDS, -1, 1):
        ts = Timestamp(seconds=seconds, nanos=999_999_999)
        assert timestamp_json(ts) == ts.ToJsonString()


@pytest.mark.parametrize(
    "text", ["line\nbreak", "cr\rlf\r\n", "sep\u2028para\u2029", "nul\x00", "tab\t", "é😀"]
)
def test_frame_data_is_one_line_and_round_trips(text: str) -> None:
    ev = events_pb2.RunEvent(
        run_id="run_1", sequence=3, text_delta=events_pb2.TextDelta(delta=text)
    )
    ev.time.FromNanoseconds(1_764_500_000_123_456_789)
    frame = sse_frame(ev)
    head, _, rest = frame.partition(b"data: ")
    assert head == b"id: 3\nevent: text_delta\n"
    data, sep, tail = rest.partition(b"\n")
    assert sep and tail == b"\n"  # exactly one data line, then the blank line
    assert b"\r" not in data
    body = json.loads(data)
    assert body["delta"] == text and body["time"] == ev.time.ToJsonString()


def _data(ev: events_pb2.RunEvent) -> dict[str, object]:
    frame = sse_frame(ev)
    head, _, rest = frame.partition(b"data: ")
    assert head == b"id: %d\nevent: %s\n" % (ev.sequence, ev.WhichOneof("event").encode())
    body: dict[str, object] = json.loads(rest)
    return body


def test_tool_progress_is_flat_camel_case() -> None:
    ev = events_pb2.RunEvent(
        run_id="run_1",
        sequence=4,
        tool_progress=events_pb2.ToolProgress(
            call_id="call_1", tool="restart_instance", fraction=0.25, text="draining"
        ),
    )
    ev.time.FromNanoseconds(1_764_500_000_000_000_000)
    assert _data(ev) == {
        "type": "tool_progress",
        "runId": "run_1",
        "sequence": 4,
        "time": "2025-11-30T10:53:20Z",
        "callId": "call_1",
        "tool": "restart_instance",
        "fraction": 0.25,
        "text": "draining",
    }


def test_the_card_fields_and_outcome_unknown() -> None:
    payload = resources_pb2.InterruptPayload(
        risk="high",
        target="instance payment-api-2",
        tool="restart_instance",
        parameter_summary="instance_id=payment-api-2",
        reason="it is abnormal",
        title="Restart payment-api-2?",
        details="Drops its connections.",
        preview="systemctl restart payment-api",
    )
    ev = events_pb2.RunEvent(
        run_id="run_1",
        sequence=5,
        interrupt=events_pb2.InterruptRaised(
            interrupt_id="int_1",
            kind=resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN,
            payload=payload,
        ),
    )
    body = _data(ev)
    assert body["kind"] == "outcome_unknown"
    assert body["payload"] == {
        "risk": "high",
        "target": "instance payment-api-2",
        "tool": "restart_instance",
        "parameterSummary": "instance_id=payment-api-2",
        "reason": "it is abnormal",
        "title": "Restart payment-api-2?",
        "details": "Drops its connections.",
        "preview": "systemctl restart payment-api",
        "options": [],
        "inputSchema": None,
        "value": None,
    }
    run = resources_pb2.Run(
        id="run_1",
        pending_interrupt=resources_pb2.Interrupt(
            id="int_1", kind=resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, payload=payload
        ),
    )
    pending = run_json(run)["pendingInterrupt"]
    assert pending["kind"] == "outcome_unknown" and pending["payload"] == body["payload"]


@pytest.mark.parametrize(
    ("enum", "prefix", "render"),
    [
        (events_pb2.Decision, "DECISION_", decision_name),
        (
            resources_pb2.InterruptKind,
            "INTERRUPT_KIND_",
            lambda v: interrupt_json(resources_pb2.Interrupt(kind=v))["kind"],
        ),
    ],
    ids=["decision", "interrupt-kind"],
)
def test_every_enum_value_renders_as_its_lower_snake_name(
    enum: Any, prefix: str, render: Callable[[int], str]
) -> None:
    """One convention for every value, the new ones included: DECISION_MARK_DONE is "mark_done"."""
    names = {}
    for name, value in enum.items():
        if value:
            names[render(value)] = name
            assert render(value) == name.removeprefix(prefix).lower(), name
    assert render(0) == "unspecified"
    if prefix == "DECISION_":
        assert {"retry", "mark_done", "abandon"} <= set(names)
    else:
        assert "outcome_unknown" in names


def test_interrupt_resolved_with_the_new_decisions() -> None:
    for value, name in (
        (events_pb2.DECISION_RETRY, "retry"),
        (events_pb2.DECISION_MARK_DONE, "mark_done"),
        (events_pb2.DECISION_ABANDON, "abandon"),
    ):
        ev = events_pb2.RunEvent(
            run_id="run_1",
            sequence=6,
            interrupt_resolved=events_pb2.InterruptResolved(
                interrupt_id="int_1", decision=value, resolved_by="alice"
            ),
        )
        assert _data(ev)["decision"] == name
        assert _data(ev)["resolvedBy"] == "alice"
    expired = events_pb2.InterruptResolved(
        interrupt_id="int_1", decision=events_pb2.DECISION_EXPIRED
    )
    assert _data(events_pb2.RunEvent(interrupt_resolved=expired))["resolvedBy"] is None


def test_a_questions_payload_carries_its_options_and_schema() -> None:
    payload = resources_pb2.InterruptPayload(
        title="Restart which instance?",
        details="Two are abnormal.",
        options=[
            resources_pb2.InterruptOption(value="a-1", label="a-1 (abnormal)"),
            resources_pb2.InterruptOption(value="a-2"),
        ],
        input_schema_json='{"type": "object"}',
    )
    ev = events_pb2.RunEvent(
        run_id="run_1",
        sequence=3,
        interrupt=events_pb2.InterruptRaised(
            interrupt_id="int_2", kind=resources_pb2.INTERRUPT_KIND_SELECT_OPTION, payload=payload
        ),
    )
    body = _data(ev)
    assert body["kind"] == "select_option"
    assert body["payload"]["options"] == [
        {"value": "a-1", "label": "a-1 (abnormal)", "description": ""},
        {"value": "a-2", "label": "a-2", "description": ""},
    ]
    assert body["payload"]["inputSchema"] == {"type": "object"}


def test_graph_events_carry_their_json_parsed() -> None:
    update = events_pb2.RunEvent(
        run_id="run_1",
        sequence=2,
        graph_update=events_pb2.GraphUpdate(
            node="talk", update_json='{"messages": [{"a": 1}]}', step=3
        ),
    )
    assert _data(update) == {
        "type": "graph_update",
        "runId": "run_1",
        "sequence": 2,
        "time": None,
        "node": "talk",
        "update": {"messages": [{"a": 1}]},
        "step": 3,
    }
    values = events_pb2.RunEvent(graph_values=events_pb2.GraphValues(values_json='{"n": 2}'))
    assert _data(values)["values"] == {"n": 2}
    custom = events_pb2.RunEvent(custom_data=events_pb2.CustomData(data_json='["x", 1]'))
    assert _data(custom)["data"] == ["x", 1], "custom data is any JSON, whole"
    done = events_pb2.RunEvent(done=events_pb2.Done(message_id="m", output_json='{"k": "v"}'))
    assert _data(done)["output"] == {"k": "v"}
    assert _data(events_pb2.RunEvent(done=events_pb2.Done()))["output"] is None, "native: null"


def test_a_graph_interrupts_value_and_a_runs_output() -> None:
    payload = resources_pb2.InterruptPayload(title="Approve?", value_json='{"question": "ok?"}')
    ev = events_pb2.RunEvent(
        interrupt=events_pb2.InterruptRaised(interrupt_id="int_3", payload=payload)
    )
    assert _data(ev)["payload"]["value"] == {"question": "ok?"}
    run = resources_pb2.Run(
        id="run_1",
        output_json='{"messages": []}',
        pending_interrupt=resources_pb2.Interrupt(id="int_3", payload=payload),
    )
    body = run_json(run)
    assert body["output"] == {"messages": []}
    assert body["pendingInterrupt"]["payload"]["value"] == {"question": "ok?"}
    assert run_json(resources_pb2.Run(id="run_2"))["output"] is None
