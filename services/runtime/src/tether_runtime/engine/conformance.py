"""The runtime side of `tether conformance`: with TETHER_CONFORMANCE_PLAN set (never in
production), the plan's agent gets a model that calls exactly one tool with one argument set and
then answers with text, and that tool reports each call to a journal file and can hold at a point
where the harness kills the process:

    before  the call is claimed (status `executing`), the tool function not yet entered
    during  the tool function ran to its end (its effect is made), not yet returned to the engine
    after   the function returned; the harness holds the tool_call row so the engine's commit of
            the result blocks, then kills it

The journal (one JSON object per line, appended) is how the harness counts executions per
idempotency key and sees whether reconcile was consulted."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether_sdk import Model, ModelRequest, Reconciled, Tool, ToolCall, ToolContext, ToolResult

from tether_runtime.engine.loaded_agent import AgentLoadError, LoadedAgent

ENV = "TETHER_CONFORMANCE_PLAN"
HOLD_POINTS = ("before", "during", "after")


@dataclass(frozen=True)
class Plan:
    agent: str
    tool: str
    args: dict[str, Any]
    journal: str
    """A file the tool's calls are appended to; `<journal>.go` releases an `after` hold."""
    hold: str = ""
    """"", or one of HOLD_POINTS: where the case's first call waits to be killed."""

    @classmethod
    def parse(cls, raw: str) -> Plan:
        data = json.loads(raw)
        plan = cls(
            agent=str(data["agent"]),
            tool=str(data["tool"]),
            args=dict(data["args"]),
            journal=str(data["journal"]),
            hold=str(data.get("hold") or ""),
        )
        if plan.hold and plan.hold not in HOLD_POINTS:
            raise ValueError(f"{ENV}: hold must be one of {HOLD_POINTS}, not {plan.hold!r}")
        return plan


class PlanModel:
    """Calls the plan's tool once, then says how it ended: the user's own model plays no part,
    so conformance proves the engine and the tools, not a model's whims."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    async def stream(self, request: ModelRequest) -> AsyncIterator[str | ToolCall]:
        results = request.results()
        await asyncio.sleep(0)
        if not results:
            yield ToolCall(self.plan.tool, self.plan.args, "conformance_0")
            return
        r = results[-1]
        yield f"conformance: {r.tool} ended: {r.outcome}: {r.summary}"


class Journal:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def held(self) -> bool:
        if not self.path.exists():
            return False
        return any(
            json.loads(line)["event"] in ("holding", "returning")
            for line in self.path.read_text().splitlines()
        )

    def write(self, event: str, key: str, **extra: Any) -> None:
        line = json.dumps({"event": event, "key": key, "pid": os.getpid(), **extra}) + "\n"
        # O_APPEND: one write per line; a SIGKILL cannot tear a line the harness reads back.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


async def _hold_forever(journal: Journal, point: str, key: str) -> None:
    journal.write("holding", key, point=point)
    await asyncio.Event().wait()  # never set: the harness kills the process here


def watched(tool: Tool, plan: Plan) -> Tool:
    """A copy of `tool` whose calls (and reconcile) are journaled and whose first call holds at
    the plan's point; the agent's own Tool object is left alone."""
    journal = Journal(plan.journal)
    go = Path(plan.journal + ".go")
    original_invoke = tool.invoke
    original_reconcile = tool.reconcile_for

    async def invoke(ctx: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        key = ctx.idempotency_key
        # Only the first call holds: the runtime that takes the run over reads the journal
        # (shared by every runtime of the case) and goes straight through.
        hold = "" if await asyncio.to_thread(journal.held) else plan.hold
        if hold == "before":
            await _hold_forever(journal, hold, key)
        journal.write("enter", key, attempt=ctx.attempt)
        result = await original_invoke(ctx, args)
        journal.write("exit", key, ok=result.ok)
        if hold == "during":
            await _hold_forever(journal, hold, key)
        if hold == "after":
            journal.write("returning", key)
            # The harness, another process, creates the file once it holds the row the engine
            # commits the result to.
            while not await asyncio.to_thread(go.exists):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        return result

    async def reconcile_for(ctx: ToolContext, args: Mapping[str, Any]) -> Reconciled:
        found = await original_reconcile(ctx, args)
        journal.write("reconcile", ctx.idempotency_key, status=found.status)
        return found

    clone = copy.copy(tool)
    # Instance attributes shadow the methods for this copy only.
    setattr(clone, "invoke", invoke)  # noqa: B010 - mypy forbids assigning to a method
    setattr(clone, "reconcile_for", reconcile_for)  # noqa: B010
    return clone


def rig(loaded: list[LoadedAgent], raw_plan: str, production: bool) -> Plan:
    """The plan, its agent's model replaced by the plan's (the others untouched). Its tool is
    watched once the agent's tools are all known (`watch`: an MCP tool is listed only when the
    agent's servers connect)."""

    if production:
        raise AgentLoadError(
            f"{ENV} is set: conformance runs are refused with TETHER_ENV=production"
        )
    try:
        plan = Plan.parse(raw_plan)
    except (ValueError, KeyError, TypeError) as err:
        raise AgentLoadError(f"{ENV} is not a conformance plan: {err}") from err
    target = next((a for a in loaded if a.name == plan.agent), None)
    if target is None:
        raise AgentLoadError(f"{ENV}: no loaded agent {plan.agent!r}")
    model: Model = PlanModel(plan)
    target.model = model
    return plan


def watch(target: LoadedAgent, plan: Plan) -> None:
    """The plan's tool of `target` replaced by its watched copy: after the agent's MCP servers
    are listed, and again each time they are listed anew (the hub rebuilds the tool list)."""
    if target.agent.tool(plan.tool) is None:
        raise AgentLoadError(f"{ENV}: agent {plan.agent!r} has no tool {plan.tool!r}")
    tools = [watched(t, plan) if t.name == plan.tool else t for t in target.agent.tools]
    target.agent = dataclasses.replace(target.agent, tools=tools)
