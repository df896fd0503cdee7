"""OpsPilot, the demo ops assistant: read-only tools run at once; mutating tools need approval."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tether_runtime.agent.model import ToolSpec
from tether_runtime.agent.tools import Tool, ToolContext, ToolResult
from tether_runtime.demo import inventory


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


_SERVICE = {"type": "string", "description": "service name, e.g. payment-api"}
_ENV = {"type": "string", "enum": ["prod", "staging"]}


class FindInstances(Tool):
    spec = ToolSpec(
        "find_instances",
        "List a service's instances, optionally only those with a status.",
        _obj(
            {
                "service": _SERVICE,
                "env": _ENV,
                "status": {"type": "string", "enum": ["healthy", "abnormal"]},
            },
            ["service", "env"],
        ),
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        async with ctx.pool.acquire() as conn:
            found = await inventory.find_instances(
                conn, args["service"], args.get("env", "prod"), args.get("status")
            )
        facts: dict[str, Any] = {"service": args["service"], "env": args.get("env", "prod")}
        if len(found) == 1:
            facts["instance_id"] = found[0]["id"]
        names = ", ".join(f"{i['id']} ({i['status']})" for i in found) or "none"
        return ToolResult(True, f"{len(found)} instance(s): {names}", {"instances": found}, facts)


class RecentErrors(Tool):
    spec = ToolSpec(
        "recent_errors",
        "Recent errors of a service in an environment.",
        _obj({"service": _SERVICE, "env": _ENV}, ["service", "env"]),
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        async with ctx.pool.acquire() as conn:
            errs = await inventory.recent_errors(conn, args["service"], args.get("env", "prod"))
        five = sum(1 for e in errs if 500 <= e["status_code"] < 600)
        by_instance: dict[str, int] = {}
        for e in errs:
            if e["instance_id"]:
                by_instance[e["instance_id"]] = by_instance.get(e["instance_id"], 0) + 1
        worst = max(by_instance, key=by_instance.__getitem__) if by_instance else ""
        summary = f"{len(errs)} recent errors ({five} 5xx)" + (
            f", mostly on {worst}" if worst else ""
        )
        return ToolResult(
            True,
            summary,
            {"errors": errs[:5], "count": len(errs), "count_5xx": five, "worst_instance": worst},
            {"service": args["service"], "env": args.get("env", "prod")},
        )


class GetLogs(Tool):
    spec = ToolSpec(
        "get_logs",
        "The latest log lines of one instance.",
        _obj({"instance_id": {"type": "string"}}, ["instance_id"]),
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        async with ctx.pool.acquire() as conn:
            lines = await inventory.logs(conn, args["instance_id"])
        return ToolResult(
            True,
            f"{len(lines)} log lines of {args['instance_id']}",
            {"lines": lines},
            {"instance_id": args["instance_id"]},
        )


class RestartInstance(Tool):
    spec = ToolSpec(
        "restart_instance",
        "Restart one instance. Needs a person's approval.",
        _obj({"instance_id": {"type": "string"}, "reason": {"type": "string"}}, ["instance_id"]),
    )
    mutating = True
    action = "instance.restart"
    risk = "high"

    async def _instance(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        async with ctx.pool.acquire() as conn:
            return await inventory.get_instance(conn, args["instance_id"])

    def target(self, args: dict[str, Any]) -> str:
        return f"instance {args['instance_id']}"

    def summarize(self, args: dict[str, Any]) -> str:
        return f"instance_id={args['instance_id']}"

    async def recheck(self, ctx: ToolContext, args: dict[str, Any]) -> str | None:
        inst = await self._instance(ctx, args)
        if inst is None:
            return f"instance {args['instance_id']} no longer exists"
        if inst["status"] != "abnormal":
            return f"instance {args['instance_id']} is {inst['status']} now"
        return None

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        res = await inventory.restart_instance(ctx.pool, args["instance_id"], key)
        return self._result(args, res)

    async def reconcile(
        self, ctx: ToolContext, args: dict[str, Any], key: str
    ) -> ToolResult | None:
        async with ctx.pool.acquire() as conn:
            res = await inventory.operation(conn, key)
        return None if res is None else self._result(args, res)

    def _result(self, args: dict[str, Any], res: dict[str, Any]) -> ToolResult:
        if not res.get("ok"):
            return ToolResult(False, str(res.get("error", "restart failed")), res)
        return ToolResult(
            True,
            f"restarted {args['instance_id']}; it is {res['status']}",
            res,
            {"instance_id": args["instance_id"]},
        )


class ScaleService(Tool):
    spec = ToolSpec(
        "scale_service",
        "Set a service's replica count. Needs a person's approval.",
        _obj(
            {
                "service": _SERVICE,
                "env": _ENV,
                "replicas": {"type": "integer", "minimum": 0, "maximum": 50},
            },
            ["service", "env", "replicas"],
        ),
    )
    mutating = True
    action = "service.scale"
    risk = "medium"

    def target(self, args: dict[str, Any]) -> str:
        return f"service {args['service']} ({args.get('env', 'prod')})"

    def scope(self, args: dict[str, Any]) -> str:
        return f"{args['service']}/{args.get('env', 'prod')}"

    async def recheck(self, ctx: ToolContext, args: dict[str, Any]) -> str | None:
        async with ctx.pool.acquire() as conn:
            svc = await inventory.get_service(conn, args["service"], args.get("env", "prod"))
        if svc is None:
            return f"service {args['service']} no longer exists"
        if svc["replicas"] == args["replicas"]:
            return f"service {args['service']} already runs {svc['replicas']} replicas"
        return None

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        res = await inventory.scale_service(
            ctx.pool, args["service"], args.get("env", "prod"), int(args["replicas"]), key
        )
        return ToolResult(bool(res.get("ok")), json.dumps(res), res)

    async def reconcile(
        self, ctx: ToolContext, args: dict[str, Any], key: str
    ) -> ToolResult | None:
        async with ctx.pool.acquire() as conn:
            res = await inventory.operation(conn, key)
        return None if res is None else ToolResult(bool(res.get("ok")), json.dumps(res), res)


class DeleteInstance(Tool):
    """An admin tool that exists in the registry but in no shipped agent's allowlist: the gate's
    test subject for a call that arrives through a side door (a tampered checkpoint)."""

    spec = ToolSpec(
        "delete_instance",
        "Delete an instance for good.",
        _obj({"instance_id": {"type": "string"}}, ["instance_id"]),
    )

    async def run(self, ctx: ToolContext, args: dict[str, Any], key: str) -> ToolResult:
        async with ctx.pool.acquire() as conn:
            await conn.execute(
                "UPDATE inv_instance SET status = 'stopped' WHERE id = $1", args["instance_id"]
            )
        return ToolResult(True, f"deleted {args['instance_id']}", {})


REGISTRY: dict[str, Tool] = {
    t.name: t
    for t in (
        FindInstances(),
        RecentErrors(),
        GetLogs(),
        RestartInstance(),
        ScaleService(),
        DeleteInstance(),
    )
}


@dataclass(frozen=True)
class AgentSpec:
    name: str
    allowlist: frozenset[str]

    def tools(self) -> list[ToolSpec]:
        return [REGISTRY[n].spec for n in sorted(self.allowlist)]


OPSPILOT = AgentSpec(
    "opspilot",
    frozenset({"find_instances", "recent_errors", "get_logs", "restart_instance", "scale_service"}),
)
AGENTS = {OPSPILOT.name: OPSPILOT}
