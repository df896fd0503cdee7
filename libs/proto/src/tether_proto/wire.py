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
from typing import Any, Generic, TypeVar, cast

from google.protobuf.descriptor import EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from tether.runtime.v1 import approvals_pb2, events_pb2, options_pb2, resources_pb2

UNSPECIFIED = "unspecified"


E = TypeVar("E", bound=int)


@dataclass(frozen=True)
class WireEnum(Generic[E]):
    """One proto enum as the wire names it. `names` and `values` leave the zero value out (no
    caller sends "unspecified"); `name` maps every value, zero included. E is the generated
    enum's type (resources_pb2.RunStatus), so a value from here fits the messages' fields."""

    descriptor: EnumDescriptor
    names: tuple[str, ...]  # in the protos' order
    values: Mapping[str, E]  # name -> number
    name: Mapping[int, str]  # number -> name
    terminal: frozenset[str]  # the names marked (terminal) = true
    terminal_values: frozenset[E]

    def name_of(self, value: int) -> str:
        """The value's name; "unspecified" for 0 and for a value this build does not know."""
        return self.name.get(value, UNSPECIFIED)


def option(options: Message, extension: FieldDescriptor) -> Any:
    """An extension's value on a descriptor's options (its default when unset). The generated
    stubs type the extensions as plain FieldDescriptors, which the Extensions map's stub refuses."""
    extensions: Any = options.Extensions
    return extensions[extension]


def wire_enum(enum: type[E]) -> WireEnum[E]:
    """`enum` is a generated enum (resources_pb2.RunStatus): its descriptor names the values."""
    descriptor: EnumDescriptor = enum.DESCRIPTOR  # type: ignore[attr-defined]
    zero = descriptor.values_by_number[0].name
    prefix = zero.removesuffix("UNSPECIFIED")
    if prefix == zero:
        raise ValueError(f"{descriptor.full_name}: its zero value {zero} is not *_UNSPECIFIED")
    name: dict[int, str] = {}
    values: dict[str, E] = {}
    terminal: set[str] = set()
    for value in descriptor.values:
        if not value.name.startswith(prefix):
            raise ValueError(f"{descriptor.full_name}: {value.name} does not start with {prefix}")
        wire_name = value.name.removeprefix(prefix).lower()
        name[value.number] = wire_name
        if value.number != 0:
            values[wire_name] = cast(E, value.number)
        if option(value.GetOptions(), options_pb2.terminal):
            terminal.add(wire_name)
    return WireEnum(
        descriptor=descriptor,
        names=tuple(values),
        values=MappingProxyType(values),
        name=MappingProxyType(name),
        terminal=frozenset(terminal),
        terminal_values=frozenset(values[n] for n in terminal),
    )


RUN_STATUS = wire_enum(resources_pb2.RunStatus)
INTERRUPT_KIND = wire_enum(resources_pb2.InterruptKind)
INTERRUPT_STATUS = wire_enum(resources_pb2.InterruptStatus)
MESSAGE_ROLE = wire_enum(resources_pb2.MessageRole)
DECISION = wire_enum(events_pb2.Decision)
TOOL_STATUS = wire_enum(events_pb2.ToolStatus)
TOOL_CALL_STATUS = wire_enum(approvals_pb2.ToolCallStatus)

# Run statuses a run never leaves, by name and by number.
TERMINAL_RUN_STATUSES = RUN_STATUS.terminal
TERMINAL_RUN_STATUS_VALUES = RUN_STATUS.terminal_values


def _answers() -> Mapping[str, events_pb2.Decision]:
    out: dict[str, events_pb2.Decision] = {}
    for value in DECISION.descriptor.values:
        word = str(option(value.GetOptions(), options_pb2.answer))
        if word:
            out[word] = DECISION.values[DECISION.name[value.number]]
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
