"""The one-shot verbs and the two service verbs: each reads Settings once and calls one function."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal

from tether_common import event_loop
from tether_common.auth import Scope, issue_token
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings
from tether_common.logging import setup_logging

if TYPE_CHECKING:
    from tether_runtime.engine.agents import AgentRegistry
    from tether_sdk import Approval

log = logging.getLogger("tether_cli")

Service = Literal["runtime", "gateway"]


def migrate(settings: Settings) -> int:
    from tether_runtime.api import admin
    from tether_runtime.engine.loaded_agent import AgentLoadError

    setup_logging("tether-migrate", settings.log_level)
    try:
        applied = asyncio.run(admin.migrate(settings.database_url, settings))
    except AgentLoadError as err:
        # The agents' migrations come from the agents: a bad one is a message, not a traceback.
        print(f"tether migrate: {err}", file=sys.stderr)
        return 2
    log.info("migrations applied", extra={"applied": applied})
    return 0


MIGRATE_CHECK_EVERY_S = 2.0


def migrate_check(settings: Settings, *, wait_s: float = 0.0) -> int:
    """`tether migrate --check [--wait S]`: 0 when the schema is current for this version, 1
    when a migration is missing (or the database stayed unreachable), 2 on a bad agent."""
    from tether_runtime.api import admin
    from tether_runtime.engine.loaded_agent import AgentLoadError

    setup_logging("tether-migrate", settings.log_level)
    try:
        missing = asyncio.run(_until_current(settings, wait_s, admin.pending_migrations))
    except AgentLoadError as err:
        print(f"tether migrate: {err}", file=sys.stderr)
        return 2
    if missing:
        print(f"tether migrate --check: not applied: {', '.join(missing)}", file=sys.stderr)
        return 1
    print("tether migrate --check: the schema is current")
    return 0


async def _until_current(
    settings: Settings,
    wait_s: float,
    pending_all: Callable[[str, Settings], Coroutine[Any, Any, list[str]]],
) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            missing = await pending_all(settings.database_url, settings)
        except (TimeoutError, OSError) as err:  # the database not reachable (yet)
            missing = [f"(database unreachable: {err})"]
        except Exception as err:  # asyncpg's own errors: e.g. the database not created yet
            if type(err).__module__.split(".")[0] != "asyncpg":
                raise
            missing = [f"(database: {err})"]
        if not missing or loop.time() >= deadline:
            return missing
        log.info("waiting for migrations", extra={"missing": missing})
        await asyncio.sleep(MIGRATE_CHECK_EVERY_S)


def seed_demo(settings: Settings, *, reset: bool = False) -> int:
    """`tether seed-demo [--reset]`: each configured agent's demo data and the demo grants
    (the mailer's too, when the mailer example is loaded)."""
    from tether_runtime.api import admin
    from tether_runtime.engine.loaded_agent import AgentLoadError

    from tether_cli import demo_mailer

    setup_logging("tether-seed", settings.log_level)
    try:
        names = [a.name for a in admin.configured_agents(settings)]
        asyncio.run(admin.seed_demo(settings.database_url, settings, reset=reset))
        if "mailer" in names:
            asyncio.run(demo_mailer.grant(settings.database_url))
    except AgentLoadError as err:
        print(f"tether seed-demo: {err}", file=sys.stderr)
        return 2
    log.info("demo data loaded", extra={"reset": reset, "agents": names})
    if reset:
        print(
            f"demo reset: {', '.join(names) or 'no agents'} as first seeded; demo grants restored"
        )
    return 0


# How a write tool stays at-most-once across a crash inside it (DESIGN section 10).
_AT_MOST_ONCE = {
    "idempotent_by_key": "idempotent by key: after a crash it is called again with the same key",
    "reconcile": "reconcile: after a crash it asks the external system what the key did",
    "person": "neither key nor reconcile: after a crash a person decides (outcome_unknown)",
}


def _approval(policy: Approval | None, action: str) -> dict[str, Any]:
    """Who may approve a write tool's call (tether_sdk.Approval; without one, the run's owner
    approves once with the tool's own grant)."""
    if policy is None:
        return {"approvers": "owner", "grant": action, "approvals": 1, "self_approval": True}
    return {
        "approvers": "grant",
        "grant": policy.grant,
        "approvals": policy.approvals,
        "self_approval": policy.self_approval,
    }


def _approval_text(approval: dict[str, Any]) -> str:
    if approval["approvers"] == "owner":
        return f"the run's owner, once (holding {approval['grant']} on the call's scope)"
    who = "2 distinct holders" if approval["approvals"] == 2 else "any holder"
    requester = "the requester too" if approval["self_approval"] else "never the requester"
    return f"{who} of {approval['grant']} on the call's scope; {requester}"


def agents(settings: Settings, *, as_json: bool = False) -> int:
    """What this configuration loads (TETHER_AGENTS and the `tether.agents` entry points), as
    the runtime would: an agent it would refuse is exit 2 with the same message."""
    from tether_runtime.engine.agents import AgentRegistry
    from tether_runtime.engine.loaded_agent import AgentLoadError

    try:
        registry = AgentRegistry.load(settings)
        # Its MCP servers' tools too, as the runtime lists them at load: connected, listed,
        # their effects derived (a stdio server started and stopped again).
        asyncio.run(_list_mcp_tools(registry))
    except AgentLoadError as err:
        print(f"tether agents: {err}", file=sys.stderr)
        return 2
    origins = {name: registry.tool_origins(name) for name in registry.agents}
    listing: list[dict[str, Any]] = [
        {
            "name": name,
            "default": name == registry.default,
            "source": loaded.source,
            "description": loaded.agent.description,
            "tools": [
                {
                    "name": t.name,
                    "effect": t.effect,
                    "description": t.description,
                    "switched_off": f"{name}:{t.name}" in settings.tool_deny,
                    "grant_to_use": f"{name}:{t.name}" in settings.tool_allow_grant
                    or f"{name}:*" in settings.tool_allow_grant,
                    **({"action": t.action, "scope": t.scope_template} if t.action else {}),
                    **(
                        {
                            "risk": t.risk,
                            "at_most_once": t.at_most_once,
                            "approval": _approval(t.approval_policy, t.action),
                        }
                        if t.effect == "write"
                        else {}
                    ),
                    "warnings": t.warnings(),
                    **({"origin": origins[name][t.name]} if t.name in origins[name] else {}),
                }
                for t in loaded.agent.tools
            ],
        }
        for name, loaded in sorted(registry.agents.items())
    ]
    if as_json:
        print(json.dumps({"agents": listing, "default": registry.default}, indent=2))
        return 0
    if not listing:
        print("no agents loaded: set TETHER_AGENTS=module:attribute or install a package with")
        print("a `tether.agents` entry point")
        return 0
    for a in listing:
        print(f"{a['name']}{' (default)' if a['default'] else ''}")
        print(f"  from: {a['source']}")
        print(f"  {a['description']}")
        width = max((len(t["name"]) for t in a["tools"]), default=0)
        for t in a["tools"]:
            off = "  [switched off by TETHER_TOOL_DENY]" if t["switched_off"] else ""
            print(f"    {t['name']:<{width}}  {t['effect']:<5}  {t['description']}{off}")
            pad = " " * (width + 13)
            if "origin" in t:
                print(f"{pad}from: {t['origin']}")
            if t["grant_to_use"]:
                print(f"{pad}offered only to holders of tool.use on {a['name']}/{t['name']}")
            if t["effect"] == "write":
                print(f"{pad}grant: {t['action']} on {t['scope']}, risk {t['risk']}")
                print(f"{pad}at-most-once: {_AT_MOST_ONCE[t['at_most_once']]}")
                print(f"{pad}approval: {_approval_text(t['approval'])}")
            elif "action" in t:
                print(f"{pad}grant: {t['action']} on {t['scope']}")
            for warning in t["warnings"]:
                print(f"{pad}note: {warning}")
        print()
    return 0


async def _list_mcp_tools(registry: AgentRegistry) -> None:
    try:
        for loaded in registry.agents.values():
            await registry.mcp.attach(loaded)
    finally:
        await registry.mcp.close()


def serve(service: Service, settings: Settings) -> int:
    """One pod of `service`. The production guard already ran (see main)."""
    setup_logging(f"tether-{service}", settings.log_level)
    log.info("starting %s", service, extra={"settings": settings.public_view()})
    try:
        event_loop.run(_server(service)(settings), uvloop=settings.uvloop)
    except KeyboardInterrupt:
        return 130
    except UnsafeSettings as err:  # e.g. a TLS certificate file that cannot be read
        print(f"tether {service}: {err.message}", file=sys.stderr)
        return 2
    except Exception as err:
        if service == "runtime":
            from tether_runtime.engine.loaded_agent import AgentLoadError

            if isinstance(err, AgentLoadError):
                print(f"tether runtime: {err}", file=sys.stderr)
                return 2
        raise
    return 0


def _server(service: Service) -> Callable[[Settings], Coroutine[Any, Any, None]]:
    # Imported late: `tether token` and `tether migrate` should not load either service.
    if service == "runtime":
        from tether_runtime.server import run_server as runtime

        return runtime
    from tether_gateway.server import run_server as gateway

    return gateway


def token(
    settings: Settings, user: str, ttl_s: float, scope: Scope, *, on_behalf: bool = False
) -> int:
    if not settings.jwt_secret:
        print("tether token: TETHER_JWT_SECRET is not set", file=sys.stderr)
        return 2
    if on_behalf and scope != "service":
        print("tether token: --on-behalf needs --scope service", file=sys.stderr)
        return 2
    print(issue_token(settings.jwt_secret, user, ttl_s=ttl_s, scope=scope, on_behalf=on_behalf))
    return 0


def grants(
    settings: Settings,
    op: Literal["add", "revoke", "list"],
    user: str | None,
    action: str | None = None,
    scope: str | None = None,
) -> int:
    """`tether grants add|revoke|list`: 0 done, 1 nothing to revoke, 2 bad input."""
    from tether_runtime.api import admin

    if op != "list":
        try:
            admin.check_grant(user or "", action or "", scope or "")
        except admin.InvalidGrant as err:
            print(f"tether grants {op}: {err}", file=sys.stderr)
            return 2
    return asyncio.run(_grants(settings.database_url, op, user, action or "", scope or ""))


async def _grants(dsn: str, op: str, user: str | None, action: str, scope: str) -> int:
    from tether_runtime.api import admin

    if op == "list":
        rows = await admin.list_grants(dsn, user)
        print(_table(["USER", "ACTION", "SCOPE"], [[g.user_id, g.action, g.scope] for g in rows]))
        return 0
    assert user is not None
    if op == "add":
        new = await admin.grant(dsn, user, action, scope)
        print(f"{'granted' if new else 'already granted'}: {user} may {action} on {scope}")
        return 0
    if await admin.revoke_grant(dsn, user, action, scope):
        print(f"revoked: {user} may no longer {action} on {scope}")
        return 0
    # A typo here would leave the real grant in place: say so, and fail.
    print(
        f"tether grants revoke: {user} has no grant {action} on {scope} (nothing revoked; "
        "`tether grants list` shows what exists)",
        file=sys.stderr,
    )
    return 1


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )
