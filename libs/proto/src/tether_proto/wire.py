"""The wire's names, read from the protos' descriptors: the one copy every Python package uses.

An enum value's name on the wire (the JSON API, the SSE events, the runtime's store) is its proto
name without the enum's prefix, in lower snake_case: RUN_STATUS_COMPLETED -> "completed",
DECISION_MARK_DONE -> "mark_done"; the zero value is "unspecified". What no name says is an option
on the value or field (proto/tether/runtime/v1/options.proto): `terminal` (a status nothing leaves),
`answer` (the word a caller chooses a decision with) and, on RunEvent's fields, `terminal_event`.
The JS client's copy, clients/js/src/wire.generated.js, is written from this module (wire_js.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import Message
from tether.runtime.v1 import approvals_pb2, events_pb2, options_pb2, resources_pb2

UNSPECIFIED = "unspecified"


@dataclass(frozen=True)
class WireEnum:
    """One proto enum as the wire names it. `names` and `values` leave the zero value out (no
    caller sends "unspecified"); `name` maps every value, zero included."""

    proto: str  # the enum's full name, e.g. "tether.runtime.v1.RunStatus"
    names: tuple[str, ...]  # in the protos' order
    values: Mapping[str, int]  # name -> number
    name: Mapping[int, str]  # number -> name
    terminal: frozenset[str]  # the names marked (terminal) = true
    terminal_values: frozenset[int]

    def name_of(self, value: int) -> str:
        """The value's name; "unspecified" for 0 and for a value this build does not know."""
        return self.name.get(value, UNSPECIFIED)


def option(options: Message, extension: FieldDescriptor) -> Any:
    """An extension's value on a descriptor's options (its default when unset). The generated
    stubs type the extensions as plain FieldDescriptors, which the Extensions map's stub refuses."""
    extensions: Any = options.Extensions
    return extensions[extension]


def wire_enum(enum: EnumDescriptor) -> WireEnum:
    zero = enum.values_by_number[0].name
    prefix = zero.removesuffix("UNSPECIFIED")
    if prefix == zero:
        raise ValueError(f"{enum.full_name}: its zero value {zero} does not end in UNSPECIFIED")
    name: dict[int, str] = {}
    terminal: set[int] = set()
    for value in enum.values:
        if not value.name.startswith(prefix):
            raise ValueError(f"{enum.full_name}: {value.name} does not start with {prefix}")
        name[value.number] = value.name.removeprefix(prefix).lower()
        if option(value.GetOptions(), options_pb2.terminal):
            terminal.add(value.number)
    values = {n: v for v, n in name.items() if v != 0}
    return WireEnum(
        proto=enum.full_name,
        names=tuple(values),
        values=MappingProxyType(values),
        name=MappingProxyType(name),
        terminal=frozenset(name[v] for v in terminal),
        terminal_values=frozenset(terminal),
    )


def _enum(file: FileDescriptor, name: str) -> WireEnum:
    return wire_enum(file.enum_types_by_name[name])


RUN_STATUS = _enum(resources_pb2.DESCRIPTOR, "RunStatus")
INTERRUPT_KIND = _enum(resources_pb2.DESCRIPTOR, "InterruptKind")
INTERRUPT_STATUS = _enum(resources_pb2.DESCRIPTOR, "InterruptStatus")
MESSAGE_ROLE = _enum(resources_pb2.DESCRIPTOR, "MessageRole")
DECISION = _enum(events_pb2.DESCRIPTOR, "Decision")
TOOL_STATUS = _enum(events_pb2.DESCRIPTOR, "ToolStatus")
TOOL_CALL_STATUS = _enum(approvals_pb2.DESCRIPTOR, "ToolCallStatus")

# Run statuses a run never leaves, by name and by number.
TERMINAL_RUN_STATUSES = RUN_STATUS.terminal
TERMINAL_RUN_STATUS_VALUES = RUN_STATUS.terminal_values


def _answers() -> Mapping[str, int]:
    out: dict[str, int] = {}
    for value in events_pb2.DESCRIPTOR.enum_types_by_name["Decision"].values:
        word = str(option(value.GetOptions(), options_pb2.answer))
        if word:
            out[word] = value.number
    return MappingProxyType(out)


# The words a caller answers an interrupt with (the HTTP API's `decision`, the clients'
# `resume(..., decision)`) -> the Decision they choose: "approve" -> DECISION_APPROVED.
ANSWERS = _answers()
# A Decision a caller chose -> the word of it ("approve"); expired and cancelled have none.
ANSWER_OF = MappingProxyType({v: w for w, v in ANSWERS.items()})

_EVENT = events_pb2.RunEvent.DESCRIPTOR
# RunEvent's kinds (its `event` oneof's fields): an SSE event's `type`.
EVENT_TYPES = tuple(f.name for f in _EVENT.oneofs_by_name["event"].fields)
# The kinds after which a run's stream has nothing more to say.
TERMINAL_EVENT_TYPES = frozenset(
    f.name
    for f in _EVENT.oneofs_by_name["event"].fields
    if option(f.GetOptions(), options_pb2.terminal_event)
)


class ToolCallStatus(StrEnum):
    """Where a tool call stands, by its name (ApprovalStep.status; the store's tool_call.status):
    the ToolCallStatus enum's values, checked against it at import."""

    PROPOSED = "proposed"
    APPROVED = "approved"
    EXECUTING = "executing"
    UNKNOWN = "unknown"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"


if tuple(ToolCallStatus) != TOOL_CALL_STATUS.names:
    raise ImportError(
        f"ToolCallStatus {tuple(ToolCallStatus)} is not the proto's {TOOL_CALL_STATUS.names}"
    )
