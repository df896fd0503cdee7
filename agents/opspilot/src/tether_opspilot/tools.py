"""OpsPilot's tools: read-only lookups run at once; restarts and scaling need a grant and a
person's approval, recheck the inventory after approval, and pass Tether's idempotency key to the
inventory API, which never acts twice on one key."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field
from tether_sdk import Approval, Confirmation, Reconciled, ToolContext, ToolResult, tool

from tether_opspilot import inventory

Service = Annotated[str, "service name, e.g. payment-api"]
Env = Literal["prod", "staging"]


@tool(effect="read")
async def find_instances(
    ctx: ToolContext,
    service: Service,
    env: Env = "prod",
    status: Literal["healthy", "abnormal"] | None = None,
) -> ToolResult:
    """List a service's instances, optionally only those with a status."""
    async with ctx.state.acquire() as conn:
        found = await inventory.find_instances(conn, service, env, status)
    facts: dict[str, Any] = {"service": service, "env": env}
    if len(found) == 1:
        facts["instance_id"] = found[0]["id"]
    names = ", ".join(f"{i['id']} ({i['status']})" for i in found) or "none"
    return ToolResult(f"{len(found)} instance(s): {names}", {"instances": found}, facts)


# Logs and error messages can carry what a service should not show to everyone (hosts, tokens in
# a stack trace): reading them takes the `logs.read` grant on the service in its environment.
@tool(effect="read", action="logs.read", scope="{service}/{env}")
async def recent_errors(ctx: ToolContext, service: Service, env: Env = "prod") -> ToolResult:
    """Recent errors of a service in an environment."""
    async with ctx.state.acquire() as conn:
        errs = await inventory.recent_errors(conn, service, env)
    five = sum(1 for e in errs if 500 <= e["status_code"] < 600)
    by_instance: dict[str, int] = {}
    for e in errs:
        if e["instance_id"]:
            by_instance[e["instance_id"]] = by_instance.get(e["instance_id"], 0) + 1
    worst = max(by_instance, key=by_instance.__getitem__) if by_instance else ""
    summary = f"{len(errs)} recent errors ({five} 5xx)" + (f", mostly on {worst}" if worst else "")
    data = {"errors": errs[:5], "count": len(errs), "count_5xx": five, "worst_instance": worst}
    return ToolResult(summary, data, {"service": service, "env": env})


@tool(
    effect="read",
    action="logs.read",
    # As for a restart: the inventory reads only an instance of the service/env named, so the
    # scope cannot be dodged by naming another service.
    scope="{service}/{env}",
    summary="instance_id={instance_id}",
)
async def get_logs(
    ctx: ToolContext, service: Service, instance_id: str, env: Env = "prod"
) -> ToolResult:
    """The latest log lines of one instance of a service."""
    async with ctx.state.acquire() as conn:
        inst = await inventory.get_instance(conn, instance_id)
        if inst is None or (inst["service"], inst["env"]) != (service, env):
            return ToolResult(f"no instance {instance_id} in {service}/{env}", ok=False)
        lines = await inventory.logs(conn, instance_id)
    facts = {"instance_id": instance_id, "service": service, "env": env}
    return ToolResult(f"{len(lines)} log lines of {instance_id}", {"lines": lines}, facts)


def _restarted(instance_id: str, res: dict[str, Any]) -> ToolResult:
    if not res.get("ok"):
        return ToolResult(str(res.get("error", "restart failed")), res, ok=False)
    return ToolResult(
        f"restarted {instance_id}; it is {res['status']}", res, {"instance_id": instance_id}
    )


async def _service_of(ctx: ToolContext, instance_id: str) -> dict[str, Any] | None:
    return await inventory.on_live(ctx.state, lambda c: inventory.get_instance(c, instance_id))


@tool(
    effect="write",
    action="instance.restart",
    # The grant covers a service in an environment; the inventory refuses an instance that is
    # not in the service/env named, so the scope cannot be dodged by naming another service.
    scope="{service}/{env}",
    summary="instance_id={instance_id}",
    risk="high",
    idempotent_by_key=True,
    examples=[{"service": "payment-api", "env": "prod", "instance_id": "payment-api-2"}],
    # The requester confirms their own restart (with instance.restart), or anyone holding
    # approve:instance.restart on the service/env decides it (the on-call lead, carol).
    approval=Approval(grant="approve:instance.restart"),
)
async def restart_instance(
    ctx: ToolContext, service: Service, instance_id: str, env: Env = "prod", reason: str = ""
) -> ToolResult:
    """Restart one instance of a service. Needs a person's approval."""
    res = await inventory.restart_instance(
        ctx.state, service, env, instance_id, ctx.idempotency_key
    )
    return _restarted(instance_id, res)


@restart_instance.confirmation
async def _restart_card(
    ctx: ToolContext, service: str, instance_id: str, env: str = "prod", reason: str = ""
) -> Confirmation:
    inst = await _service_of(ctx, instance_id)
    where = f" ({inst['service']}/{inst['env']})" if inst else ""
    return Confirmation(
        title="Restart instance",
        target=f"instance {instance_id}{where}",
        summary=f"instance_id={instance_id}",
        risk="high",
        details="A restart drops the instance's open connections; it is back within a minute.",
        preview=(f"status now: {inst['status']}, restarts so far: {inst['restart_count']}")
        if inst
        else "",
    )


@restart_instance.recheck
async def _restart_still_needed(
    ctx: ToolContext, service: str, instance_id: str, env: str = "prod", reason: str = ""
) -> str | None:
    inst = await _service_of(ctx, instance_id)
    if inst is None:
        return f"instance {instance_id} no longer exists"
    if inst["status"] != "abnormal":
        return f"instance {instance_id} is {inst['status']} now"
    return None


@restart_instance.reconcile
async def _restart_done(
    ctx: ToolContext, service: str, instance_id: str, env: str = "prod", reason: str = ""
) -> Reconciled:
    res = await inventory.on_live(ctx.state, lambda c: inventory.operation(c, ctx.idempotency_key))
    return Reconciled.not_done() if res is None else Reconciled.done(_restarted(instance_id, res))


@tool(
    effect="write",
    action="service.scale",
    scope="{service}/{env}",
    risk="medium",
    idempotent_by_key=True,
    examples=[{"service": "payment-api", "env": "prod", "replicas": 4}],
)
async def scale_service(
    ctx: ToolContext,
    service: Service,
    replicas: Annotated[int, Field(ge=0, le=50), "the new replica count"],
    env: Env = "prod",
) -> ToolResult:
    """Set a service's replica count. Needs a person's approval."""
    res = await inventory.scale_service(ctx.state, service, env, replicas, ctx.idempotency_key)
    return ToolResult(json.dumps(res), res, ok=bool(res.get("ok")))


@scale_service.confirmation
async def _scale_card(
    ctx: ToolContext, service: str, replicas: int, env: str = "prod"
) -> Confirmation:
    async with ctx.state.acquire() as conn:
        svc = await inventory.get_service(conn, service, env)
    now = f"{svc['replicas']} replicas now" if svc else "unknown service"
    return Confirmation(
        title="Scale service",
        target=f"service {service} ({env})",
        summary=f"replicas={replicas}",
        risk="medium",
        preview=f"{now} -> {replicas}",
    )


@scale_service.recheck
async def _scale_still_needed(
    ctx: ToolContext, service: str, replicas: int, env: str = "prod"
) -> str | None:
    async with ctx.state.acquire() as conn:
        svc = await inventory.get_service(conn, service, env)
    if svc is None:
        return f"service {service} no longer exists"
    if svc["replicas"] == replicas:
        return f"service {service} already runs {svc['replicas']} replicas"
    return None


@scale_service.reconcile
async def _scale_done(
    ctx: ToolContext, service: str, replicas: int, env: str = "prod"
) -> Reconciled:
    async with ctx.state.acquire() as conn:
        res = await inventory.operation(conn, ctx.idempotency_key)
    if res is None:
        return Reconciled.not_done()
    return Reconciled.done(ToolResult(json.dumps(res), res, ok=bool(res.get("ok"))))


@tool(
    effect="write",
    action="instance.delete",
    scope="{service}/{env}",
    risk="high",
    idempotent_by_key=True,
    examples=[{"service": "payment-api", "env": "staging", "instance_id": "payment-api-staging-1"}],
)
async def delete_instance(
    ctx: ToolContext, service: Service, instance_id: str, env: Env = "prod"
) -> ToolResult:
    """Delete an instance for good. Needs a person's approval and the instance.delete grant,
    which the demo gives nobody; operators can also switch it off with TETHER_TOOL_DENY."""
    res = await inventory.delete_instance(ctx.state, service, env, instance_id, ctx.idempotency_key)
    if not res.get("ok"):
        return ToolResult(str(res.get("error", "delete failed")), res, ok=False)
    return ToolResult(f"deleted {instance_id}", res)
