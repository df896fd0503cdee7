"""Domain views and rows -> protobuf messages, for the servicer boundary."""

from __future__ import annotations

import json
from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp
from tether.runtime.v1 import resources_pb2
from tether_proto import wire

from tether_runtime.domain import events as ev
from tether_runtime.domain.records import ConversationRow, MessageRow
from tether_runtime.domain.views import AgentView, InterruptView, RunView

# The store's names are the wire's (tether_proto.wire): status "queued" is RUN_STATUS_QUEUED.
RUN_STATUS = wire.RUN_STATUS.values
INTERRUPT_STATUS = wire.INTERRUPT_STATUS.values
ROLES = wire.MESSAGE_ROLE.values


def _ts(value: str | datetime) -> Timestamp:
    dt = datetime.fromisoformat(value) if isinstance(value, str) else value
    return ev.timestamp(dt)


def interrupt_pb(i: InterruptView) -> resources_pb2.Interrupt:
    msg = resources_pb2.Interrupt(
        id=i.id,
        run_id=i.run_id,
        kind=ev.KINDS[i.kind],
        status=INTERRUPT_STATUS[i.status],
        payload=ev.payload_message(i.payload),
        expire_time=_ts(i.expires_at),
        resolved_by=i.resolved_by or "",
        decision=i.decision or "",
    )
    if i.resolved_at:
        msg.resolve_time.CopyFrom(_ts(i.resolved_at))
    return msg


def run_pb(r: RunView) -> resources_pb2.Run:
    msg = resources_pb2.Run(
        id=r.id,
        conversation_id=r.conversation_id,
        user_id=r.user_id,
        user_message_id=r.user_message_id,
        agent=r.agent,
        status=RUN_STATUS[r.status],
        last_sequence=r.last_sequence,
        cancel_requested=r.cancel_requested,
        create_time=_ts(r.created_at),
        update_time=_ts(r.updated_at),
        usage=resources_pb2.TokenUsage(
            input_tokens=r.input_tokens, output_tokens=r.output_tokens, model_steps=r.model_steps
        ),
        events_expired=r.events_expired,
        output_json=r.output_json,
    )
    if r.pending_interrupt is not None:
        msg.pending_interrupt.CopyFrom(interrupt_pb(r.pending_interrupt))
    return msg


def conversation_pb(c: ConversationRow) -> resources_pb2.Conversation:
    return resources_pb2.Conversation(
        id=c.id,
        user_id=c.user_id,
        title=c.title,
        facts_json=json.dumps(c.facts),
        summary=c.summary,
        version=c.version,
        create_time=_ts(c.created_at),
        update_time=_ts(c.updated_at),
    )


def message_pb(m: MessageRow) -> resources_pb2.Message:
    return resources_pb2.Message(
        id=m.id,
        conversation_id=m.conversation_id,
        run_id=m.run_id or "",
        role=ROLES[m.role],
        content=m.content,
        tool_call_id=m.tool_call_id or "",
        create_time=_ts(m.created_at),
    )


def agent_pb(a: AgentView) -> resources_pb2.Agent:
    return resources_pb2.Agent(
        name=a.name,
        description=a.description,
        tools=[
            resources_pb2.AgentTool(
                name=t.name,
                description=t.description,
                effect=t.effect,
                action=t.action,
                risk=t.risk,
                origin=t.origin,
            )
            for t in a.tools
        ],
        kind=a.kind,
        input_schema_json=a.input_schema_json,
        output_schema_json=a.output_schema_json,
        state_schema_json=a.state_schema_json,
    )
