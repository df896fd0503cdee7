"""tether_proto.wire against the protos: every enum of the API is named, every value has its name
both ways, and the terminal sets, answers and terminal events are exactly what options.proto's
annotations say; the names themselves are pinned, since they are the wire."""

from __future__ import annotations

from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from tether.runtime.v1 import (
    approvals_pb2,
    audit_pb2,
    events_pb2,
    options_pb2,
    resources_pb2,
    runtime_service_pb2,
)
from tether_proto import wire

MODULES: tuple[ModuleType, ...] = (
    approvals_pb2,
    audit_pb2,
    events_pb2,
    options_pb2,
    resources_pb2,
    runtime_service_pb2,
)
ENUMS = [e for e in vars(wire).values() if isinstance(e, wire.WireEnum)]


def all_enums() -> list[EnumDescriptor]:
    out: list[EnumDescriptor] = []
    for module in MODULES:
        out += module.DESCRIPTOR.enum_types_by_name.values()
        for message in module.DESCRIPTOR.message_types_by_name.values():
            out += message.enum_types
    return out


def test_every_enum_of_the_api_has_its_names_in_wire() -> None:
    assert sorted(e.full_name for e in all_enums()) == sorted(e.descriptor.full_name for e in ENUMS)


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.descriptor.name)
def test_every_value_has_a_name_both_ways(enum: wire.WireEnum[int]) -> None:
    numbers = [v.number for v in enum.descriptor.values]
    assert sorted(enum.name) == sorted(numbers)
    assert enum.name[0] == wire.UNSPECIFIED
    assert list(enum.values) == list(enum.names) == [enum.name[n] for n in numbers if n]
    for name, number in enum.values.items():
        assert enum.name[number] == name
        assert enum.name_of(number) == name
        proto = enum.descriptor.values_by_number[number].name
        assert proto.endswith("_" + name.upper())
    assert enum.name_of(0) == enum.name_of(max(numbers) + 1) == wire.UNSPECIFIED


@pytest.mark.parametrize("enum", ENUMS, ids=lambda e: e.descriptor.name)
def test_terminal_sets_are_the_annotated_values(enum: wire.WireEnum[int]) -> None:
    marked = {
        v.number for v in enum.descriptor.values if v.GetOptions().Extensions[options_pb2.terminal]
    }
    assert enum.terminal_values == marked
    assert enum.terminal == {enum.name[n] for n in marked}


def test_the_names_on_the_wire() -> None:
    """What the hand-written maps said before tether_proto.wire: the wire does not change."""
    assert wire.RUN_STATUS.names == (
        "queued",
        "running",
        "interrupted",
        "completed",
        "failed",
        "cancelled",
        "waiting",
    )
    assert wire.RUN_STATUS.values["waiting"] == resources_pb2.RUN_STATUS_WAITING
    assert wire.TERMINAL_RUN_STATUSES == {"completed", "failed", "cancelled"}
    assert wire.TERMINAL_RUN_STATUS_VALUES == {
        resources_pb2.RUN_STATUS_COMPLETED,
        resources_pb2.RUN_STATUS_FAILED,
        resources_pb2.RUN_STATUS_CANCELLED,
    }
    assert wire.INTERRUPT_KIND.names == (
        "confirm_action",
        "select_option",
        "provide_input",
        "outcome_unknown",
    )
    assert wire.INTERRUPT_STATUS.names == ("pending", "resolved", "expired", "cancelled")
    assert wire.INTERRUPT_STATUS.terminal == {"resolved", "expired", "cancelled"}
    assert wire.MESSAGE_ROLE.values == {
        "user": resources_pb2.MESSAGE_ROLE_USER,
        "assistant": resources_pb2.MESSAGE_ROLE_ASSISTANT,
        "tool": resources_pb2.MESSAGE_ROLE_TOOL,
    }
    assert wire.DECISION.values == {
        "approved": events_pb2.DECISION_APPROVED,
        "rejected": events_pb2.DECISION_REJECTED,
        "expired": events_pb2.DECISION_EXPIRED,
        "cancelled": events_pb2.DECISION_CANCELLED,
        "responded": events_pb2.DECISION_RESPONDED,
        "retry": events_pb2.DECISION_RETRY,
        "mark_done": events_pb2.DECISION_MARK_DONE,
        "abandon": events_pb2.DECISION_ABANDON,
    }
    assert wire.TOOL_STATUS.names == ("success", "error")
    assert wire.TERMINAL_EVENT_TYPES == {"done", "error", "cancelled"}


def test_answers_are_the_annotated_words_in_the_protos_order() -> None:
    assert dict(wire.ANSWERS) == {
        "approve": events_pb2.DECISION_APPROVED,
        "reject": events_pb2.DECISION_REJECTED,
        "respond": events_pb2.DECISION_RESPONDED,
        "retry": events_pb2.DECISION_RETRY,
        "mark_done": events_pb2.DECISION_MARK_DONE,
        "abandon": events_pb2.DECISION_ABANDON,
    }
    assert list(wire.ANSWERS) == ["approve", "reject", "respond", "retry", "mark_done", "abandon"]
    annotated = {
        v.GetOptions().Extensions[options_pb2.answer]: v.number
        for v in events_pb2.Decision.DESCRIPTOR.values
        if v.GetOptions().Extensions[options_pb2.answer]
    }
    assert dict(wire.ANSWERS) == annotated
    assert {wire.ANSWER_OF[v]: v for v in wire.ANSWER_OF} == dict(wire.ANSWERS)
    # Nobody answers with an expiry or a cancel: those the runtime decides.
    assert events_pb2.DECISION_EXPIRED not in wire.ANSWER_OF
    assert events_pb2.DECISION_CANCELLED not in wire.ANSWER_OF


def test_event_types_are_the_oneof_and_the_terminal_ones_annotated() -> None:
    oneof = events_pb2.RunEvent.DESCRIPTOR.oneofs_by_name["event"]
    assert wire.EVENT_TYPES == tuple(f.name for f in oneof.fields)
    assert "reset" in wire.EVENT_TYPES and "tool_progress" in wire.EVENT_TYPES
    marked = {f.name for f in oneof.fields if f.GetOptions().Extensions[options_pb2.terminal_event]}
    assert wire.TERMINAL_EVENT_TYPES == marked


def test_tool_call_status_is_the_proto_enum() -> None:
    assert tuple(wire.ToolCallStatus) == wire.TOOL_CALL_STATUS.names
    assert [s.value for s in wire.ToolCallStatus] == [
        "proposed",
        "approved",
        "executing",
        "unknown",
        "succeeded",
        "failed",
        "rejected",
    ]
    assert wire.ToolCallStatus.SUCCEEDED == "succeeded"  # a str: the store and the wire take it
    assert (
        wire.TOOL_CALL_STATUS.values["unknown"] == approvals_pb2.TOOL_CALL_STATUS_UNKNOWN
    )  # same numbering as the proto


def _enum(name: str, values: list[str]) -> EnumTypeWrapper:
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name=f"{name.lower()}.proto", package="t")
    enum = file.enum_type.add(name=name)
    for number, value in enumerate(values):
        enum.value.add(name=value, number=number)
    pool.Add(file)
    return EnumTypeWrapper(pool.FindEnumTypeByName(f"t.{name}"))


def test_an_enum_off_the_naming_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="UNSPECIFIED"):
        wire.wire_enum(_enum("Color", ["COLOR_NONE", "COLOR_RED"]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not start with COLOR_"):
        wire.wire_enum(_enum("Colour", ["COLOR_UNSPECIFIED", "RED"]))  # type: ignore[arg-type]
    named = wire.wire_enum(_enum("Shade", ["SHADE_UNSPECIFIED", "SHADE_DARK_GREY"]))  # type: ignore[arg-type]
    assert named.names == ("dark_grey",) and named.terminal == frozenset()
