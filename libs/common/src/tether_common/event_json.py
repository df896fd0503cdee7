"""The RunEvent <-> browser JSON mapping: the seed's flat shape (`type`, `runId`, `sequence`, fields in
camelCase), written by hand because json_format.MessageToDict is slow and nests the oneof. Field
names are camelCase; enum values are their proto names without the prefix, in lower snake_case
(DECISION_MARK_DONE -> "mark_done", INTERRUPT_KIND_OUTCOME_UNKNOWN -> "outcome_unknown"), as
tether_proto.wire reads them from the protos."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import orjson
from tether.runtime.v1 import events_pb2, resources_pb2
from tether_proto import wire

TERMINAL_TYPES = wire.TERMINAL_EVENT_TYPES


_EPOCH = datetime(1970, 1, 1)
_SECONDS: dict[int, str] = {}  # whole second -> "YYYY-MM-DDTHH:MM:SS"; events come in bursts


def rfc3339(seconds: int, nanos: int) -> str:
    """Exactly `Timestamp.ToJsonString()` (0, 3, 6 or 9 fraction digits, `Z`), about 10x faster:
    the date part is cached per second, since every event of a burst shares it."""
    base = _SECONDS.get(seconds)
    if base is None:
        base = (_EPOCH + timedelta(seconds=seconds)).isoformat()
        if len(_SECONDS) >= 4096:
            _SECONDS.clear()
        _SECONDS[seconds] = base
    if nanos == 0:
        return base + "Z"
    if nanos % 1_000_000 == 0:
        return f"{base}.{nanos // 1_000_000:03d}Z"
    if nanos % 1_000 == 0:
        return f"{base}.{nanos // 1_000:06d}Z"
    return f"{base}.{nanos:09d}Z"


def timestamp_json(ts: Any) -> str | None:
    seconds, nanos = ts.seconds, ts.nanos
    if not seconds and not nanos:
        return None
    if 0 <= nanos < 1_000_000_000:
        return rfc3339(seconds, nanos)
    return str(ts.ToJsonString())  # not normalized: let protobuf normalize (or refuse) it


def decision_name(value: int) -> str:
    return wire.DECISION.name_of(value)


def run_status_name(value: int) -> str:
    return wire.RUN_STATUS.name_of(value)


def parsed(text: str) -> Any:
    """A `*_json` field (a graph's input, update, state, resume value...) as the JSON value it
    holds; None when empty (absent) or, never expected from the runtime, not JSON."""
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def payload_json(p: resources_pb2.InterruptPayload) -> dict[str, Any]:
    return {
        "risk": p.risk,
        "target": p.target,
        "tool": p.tool,
        "parameterSummary": p.parameter_summary,
        "reason": p.reason,
        "title": p.title,
        "details": p.details,
        "preview": p.preview,
        "options": [
            {"value": o.value, "label": o.label or o.value, "description": o.description}
            for o in p.options
        ],
        "inputSchema": json.loads(p.input_schema_json) if p.input_schema_json else None,
        "value": parsed(p.value_json),
    }


def interrupt_json(i: resources_pb2.Interrupt) -> dict[str, Any]:
    return {
        "id": i.id,
        "runId": i.run_id,
        "kind": wire.INTERRUPT_KIND.name_of(i.kind),
        "status": wire.INTERRUPT_STATUS.name_of(i.status),
        "payload": payload_json(i.payload),
        "expiresAt": timestamp_json(i.expire_time),
        "resolvedAt": timestamp_json(i.resolve_time),
        "resolvedBy": i.resolved_by or None,
        "decision": i.decision or None,
    }


def run_json(r: resources_pb2.Run) -> dict[str, Any]:
    return {
        "id": r.id,
        "conversationId": r.conversation_id,
        "userMessageId": r.user_message_id,
        "agent": r.agent,
        "status": run_status_name(r.status),
        "lastSequence": r.last_sequence,
        "cancelRequested": r.cancel_requested,
        "pendingInterrupt": interrupt_json(r.pending_interrupt)
        if r.HasField("pending_interrupt")
        else None,
        "createdAt": timestamp_json(r.create_time),
        "updatedAt": timestamp_json(r.update_time),
        "usage": usage_json(r.usage),
        "eventsExpired": r.events_expired,
        "output": parsed(r.output_json),
    }


def usage_json(u: resources_pb2.TokenUsage) -> dict[str, int]:
    return {
        "inputTokens": u.input_tokens,
        "outputTokens": u.output_tokens,
        "modelSteps": u.model_steps,
    }


def event_type(ev: events_pb2.RunEvent) -> str:
    return ev.WhichOneof("event") or "unspecified"


def event_json(ev: events_pb2.RunEvent) -> dict[str, Any]:
    """The flat JSON object of one event, as `data:` of an SSE message carries it."""
    kind = event_type(ev)
    out: dict[str, Any] = {
        "type": kind,
        "runId": ev.run_id,
        "sequence": ev.sequence,
        "time": timestamp_json(ev.time),
    }
    if kind == "text_delta":
        out["messageId"] = ev.text_delta.message_id
        out["delta"] = ev.text_delta.delta
    elif kind == "tool_started":
        t = ev.tool_started
        out.update(callId=t.call_id, tool=t.tool, argsSummary=t.args_summary)
    elif kind == "tool_finished":
        f = ev.tool_finished
        status = "success" if f.status == events_pb2.TOOL_STATUS_SUCCESS else "error"
        out.update(callId=f.call_id, tool=f.tool, status=status, summary=f.summary)
    elif kind == "tool_progress":
        g = ev.tool_progress
        out.update(callId=g.call_id, tool=g.tool, fraction=g.fraction, text=g.text)
    elif kind == "run_started":
        out["conversationId"] = ev.run_started.conversation_id
    elif kind == "interrupt":
        i = ev.interrupt
        out.update(
            interruptId=i.interrupt_id,
            kind=wire.INTERRUPT_KIND.name_of(i.kind),
            payload=payload_json(i.payload),
            expiresAt=timestamp_json(i.expire_time),
        )
    elif kind == "interrupt_resolved":
        out.update(
            interruptId=ev.interrupt_resolved.interrupt_id,
            decision=decision_name(ev.interrupt_resolved.decision),
            resolvedBy=ev.interrupt_resolved.resolved_by or None,
        )
    elif kind == "done":
        out["messageId"] = ev.done.message_id
        out["usage"] = usage_json(ev.done.usage)
        out["output"] = parsed(ev.done.output_json)
    elif kind == "error":
        out.update(code=ev.error.code, message=ev.error.message)
    elif kind == "cancelled":
        out["reason"] = ev.cancelled.reason
    elif kind == "reset":
        out["run"] = run_json(ev.reset.run)
    elif kind == "graph_update":
        u = ev.graph_update
        out.update(node=u.node, update=parsed(u.update_json), step=u.step)
    elif kind == "graph_values":
        out.update(values=parsed(ev.graph_values.values_json), step=ev.graph_values.step)
    elif kind == "custom_data":
        out.update(data=parsed(ev.custom_data.data_json), step=ev.custom_data.step)
    return out


def sse_frame(ev: events_pb2.RunEvent) -> bytes:
    """One complete SSE message (id, event, one-line data, blank line), encoded once."""
    body = event_json(ev)
    data = orjson.dumps(body)  # compact UTF-8; escapes control characters, so it stays one line
    kind = body["type"]
    if kind == "reset":  # reset is not a position in the log: no id, so Last-Event-ID stays put
        return b"event: reset\ndata: " + data + b"\n\n"
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (ev.sequence, kind.encode(), data)
