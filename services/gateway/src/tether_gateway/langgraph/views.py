"""The JSON of LangGraph's resources (langgraph_sdk.schema) for Tether's: Assistant for an
agent, Thread for a conversation, Run for a stretch of a Tether run, ThreadState."""

from __future__ import annotations

from typing import Any

from tether.runtime.v1 import resources_pb2
from tether_common.event_json import timestamp_json

from tether_gateway.langgraph import ids
from tether_gateway.langgraph.frames import AGENT_NODE
from tether_gateway.langgraph.lookup import LgRun
from tether_gateway.langgraph.thread_state import ThreadValues

_THREAD_STATUS = {
    resources_pb2.RUN_STATUS_QUEUED: "busy",
    resources_pb2.RUN_STATUS_RUNNING: "busy",
    resources_pb2.RUN_STATUS_WAITING: "busy",
    resources_pb2.RUN_STATUS_INTERRUPTED: "interrupted",
    resources_pb2.RUN_STATUS_FAILED: "error",
}
_EPOCH = "1970-01-01T00:00:00Z"


def assistant_json(agent: resources_pb2.Agent) -> dict[str, Any]:
    return {
        "assistant_id": ids.assistant_id(agent.name),
        "graph_id": agent.name,
        "name": agent.name,
        "description": agent.description or None,
        "config": {},
        "context": {},
        "metadata": {"created_by": "tether"},
        "version": 1,
        "created_at": _EPOCH,
        "updated_at": _EPOCH,
    }


def thread_status(latest: resources_pb2.Run | None) -> str:
    """idle, busy, interrupted or error, from the thread's newest Tether run."""
    if latest is None:
        return "idle"
    return _THREAD_STATUS.get(latest.status, "idle")


def thread_json(
    conv: resources_pb2.Conversation,
    latest: resources_pb2.Run | None,
    values: Any = None,
    interrupts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    # Keyed by the task that waits, as the state's `tasks` name it (the interrupt's id).
    pending = {interrupts[0]["id"]: interrupts} if interrupts else {}
    return {
        "thread_id": conv.id,
        "created_at": timestamp_json(conv.create_time),
        "updated_at": timestamp_json(conv.update_time),
        "metadata": {"title": conv.title} if conv.title else {},
        "status": thread_status(latest),
        "values": {} if values is None else values,
        "interrupts": pending,
        "config": {},
    }


def run_json(lg: LgRun) -> dict[str, Any]:
    run, stretch = lg.run, lg.stretch
    created = timestamp_json(run.create_time)
    if stretch.index > 0:
        first = next((e for e in lg.events if e.sequence == stretch.first), None)
        created = timestamp_json(first.time) if first is not None else created
    return {
        "run_id": lg.run_id,
        "thread_id": lg.thread_id,
        "assistant_id": ids.assistant_id(run.agent),
        "created_at": created,
        "updated_at": timestamp_json(run.update_time),
        "status": lg.status,
        "metadata": {"tether_run_id": run.id, "stretch": stretch.index},
        "multitask_strategy": None,
        "kwargs": {},
    }


def state_json(
    thread_id: str, tv: ThreadValues, latest: resources_pb2.Run | None
) -> dict[str, Any]:
    """At an interrupt, `next` and `tasks` name the graph's nodes as LangGraph does (the nodes a
    resume runs; the task that asked holds the interrupts); a native agent's interrupt is its
    `agent` node's."""
    checkpoint_id = f"{latest.id}:{latest.last_sequence}" if latest is not None else ""
    interrupts = tv.interrupts
    asking = tv.asking or AGENT_NODE
    next_nodes = (list(tv.next) or [asking]) if interrupts else []
    tasks: list[dict[str, Any]] = []
    for name in next_nodes:
        mine = bool(interrupts) and name == asking and not any(t["interrupts"] for t in tasks)
        task_id = interrupts[0]["id"] if mine else ids.task_id(interrupts[0]["id"], len(tasks))
        tasks.append(
            {
                "id": task_id,
                "name": name,
                "path": [],
                "error": None,
                "interrupts": interrupts if mine else [],
                "checkpoint": None,
                "state": None,
                "result": None,
            }
        )
    values = tv.values
    if isinstance(values, dict):
        values = {k: v for k, v in values.items() if k != "__interrupt__"}
    return {
        "values": values,
        "next": next_nodes,
        "checkpoint": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id},
        "metadata": {},
        "created_at": timestamp_json(latest.update_time) if latest is not None else None,
        "parent_checkpoint": None,
        "tasks": tasks,
        "interrupts": interrupts,
    }
