"""Building RunEvents: the one place the engine touches the event schema. Events are stored as the
serialized protobuf and published in batches, so a stream passes them on without re-encoding."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import events_pb2, resources_pb2

# A batch's wire form is shared with the gateway, which follows a run's batches on the bus too.
from tether_common.event_batch import batch_from_encoded as batch_from_encoded
from tether_common.event_batch import split_batch as split_batch
from tether_proto import wire

RunEvent = events_pb2.RunEvent
TERMINAL = wire.TERMINAL_EVENT_TYPES
# The store's names are the wire's (tether_proto.wire): decision "approved" is DECISION_APPROVED.
DECISIONS = wire.DECISION.values
KINDS = wire.INTERRUPT_KIND.values


def timestamp(dt: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(dt)
    return ts


def run_started(conversation_id: str) -> RunEvent:
    return RunEvent(run_started=events_pb2.RunStarted(conversation_id=conversation_id))


def text_delta(
    message_id: str,
    delta: str,
    *,
    graph_message_id: str = "",
    graph_node: str = "",
    graph_namespace: str = "",
) -> RunEvent:
    """`graph_*`: a graph agent's text, as LangGraph streams it (its message's id, its node and
    the node's checkpoint namespace)."""
    return RunEvent(
        text_delta=events_pb2.TextDelta(
            message_id=message_id,
            delta=delta,
            graph_message_id=graph_message_id,
            graph_node=graph_node,
            graph_namespace=graph_namespace,
        )
    )


def tool_started(call_id: str, tool: str, args_summary: str) -> RunEvent:
    return RunEvent(
        tool_started=events_pb2.ToolStarted(call_id=call_id, tool=tool, args_summary=args_summary)
    )


def tool_finished(call_id: str, tool: str, ok: bool, summary: str) -> RunEvent:
    status = events_pb2.TOOL_STATUS_SUCCESS if ok else events_pb2.TOOL_STATUS_ERROR
    return RunEvent(
        tool_finished=events_pb2.ToolFinished(
            call_id=call_id, tool=tool, status=status, summary=summary
        )
    )


def tool_progress(call_id: str, tool: str, fraction: float, text: str) -> RunEvent:
    # Clamped here, once, so no stream or browser has to guard against a tool's odd number.
    fraction = min(max(fraction, 0.0), 1.0) if fraction == fraction else 0.0  # NaN -> 0
    return RunEvent(
        tool_progress=events_pb2.ToolProgress(
            call_id=call_id, tool=tool, fraction=fraction, text=text
        )
    )


def payload_message(payload: dict[str, Any]) -> resources_pb2.InterruptPayload:
    schema = payload.get("input_schema")
    return resources_pb2.InterruptPayload(
        options=[
            resources_pb2.InterruptOption(
                value=str(o.get("value", "")),
                label=str(o.get("label", "")),
                description=str(o.get("description", "")),
            )
            for o in payload.get("options") or []
        ],
        input_schema_json=json.dumps(schema, sort_keys=True) if schema else "",
        risk=payload.get("risk", ""),
        target=payload.get("target", ""),
        tool=payload.get("tool", ""),
        parameter_summary=payload.get("parameter_summary", ""),
        reason=payload.get("reason", ""),
        title=payload.get("title", ""),
        details=payload.get("details", ""),
        preview=payload.get("preview", ""),
        # A graph's interrupt(value), whole (masked with the card): absent from native cards.
        value_json=json_text(payload["value"]) if "value" in payload else "",
        # A graph's interrupt: the node that asked, and the nodes a resume runs.
        graph_node=str(payload.get("graph_node") or ""),
        graph_next=[str(n) for n in payload.get("graph_next") or []],
    )


def interrupt(
    interrupt_id: str, kind: str, payload: dict[str, Any], expires_at: datetime, call_id: str = ""
) -> RunEvent:
    return RunEvent(
        interrupt=events_pb2.InterruptRaised(
            interrupt_id=interrupt_id,
            kind=KINDS[kind],
            payload=payload_message(payload),
            expire_time=timestamp(expires_at),
            call_id=call_id,
        )
    )


def interrupt_resolved(interrupt_id: str, decision: str, resolved_by: str = "") -> RunEvent:
    return RunEvent(
        interrupt_resolved=events_pb2.InterruptResolved(
            interrupt_id=interrupt_id, decision=DECISIONS[decision], resolved_by=resolved_by
        )
    )


def done(
    message_id: str,
    input_tokens: int = 0,
    output_tokens: int = 0,
    model_steps: int = 0,
    output_json: str = "",
) -> RunEvent:
    usage = resources_pb2.TokenUsage(
        input_tokens=input_tokens, output_tokens=output_tokens, model_steps=model_steps
    )
    return RunEvent(
        done=events_pb2.Done(message_id=message_id, usage=usage, output_json=output_json)
    )


def json_text(value: Any) -> str:
    """A JSON value as the text a `*_json` field carries (compact, UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def graph_update(node: str, update: Any, step: int = 0) -> RunEvent:
    return RunEvent(
        graph_update=events_pb2.GraphUpdate(node=node, update_json=json_text(update), step=step)
    )


def graph_values(values: Any, step: int = 0) -> RunEvent:
    return RunEvent(graph_values=events_pb2.GraphValues(values_json=json_text(values), step=step))


def custom_data(data: Any, step: int = 0) -> RunEvent:
    return RunEvent(custom_data=events_pb2.CustomData(data_json=json_text(data), step=step))


def error(code: str, message: str) -> RunEvent:
    return RunEvent(error=events_pb2.Error(code=code, message=message))


def cancelled(reason: str) -> RunEvent:
    return RunEvent(cancelled=events_pb2.Cancelled(reason=reason))


def reset(run: resources_pb2.Run) -> RunEvent:
    return RunEvent(run_id=run.id, reset=events_pb2.Reset(run=run))


def kind_of(ev: RunEvent) -> str:
    return ev.WhichOneof("event") or ""


def is_terminal(ev: RunEvent) -> bool:
    return kind_of(ev) in TERMINAL
