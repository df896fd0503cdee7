"""The one-shot verbs and the two service verbs: each reads Settings once and calls one function."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Literal

import uvloop
from tether_common.auth import Scope, issue_token
from tether_common.config import Settings
from tether_common.logging import setup_logging

log = logging.getLogger("tether_cli")

Service = Literal["runtime", "gateway"]


def migrate(settings: Settings) -> int:
    from tether_runtime.provision import migrate_all

    setup_logging("tether-migrate", settings.log_level)
    applied = asyncio.run(migrate_all(settings.database_url))
    log.info("migrations applied", extra={"applied": applied})
    return 0


def seed_demo(settings: Settings) -> int:
    from tether_runtime.provision import seed_demo as seed

    setup_logging("tether-seed", settings.log_level)
    asyncio.run(seed(settings.database_url))
    log.info("demo data loaded")
    return 0


def serve(service: Service, settings: Settings) -> int:
    """One pod of `service`. The production guard already ran (see main)."""
    setup_logging(f"tether-{service}", settings.log_level)
    log.info("starting %s", service, extra={"settings": settings.public_view()})
    try:
        uvloop.run(_server(service)(settings))
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        if service == "runtime":
            from tether_runtime.agents import AgentLoadError

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


def token(settings: Settings, user: str, ttl_s: float, scope: Scope) -> int:
    if not settings.jwt_secret:
        print("tether token: TETHER_JWT_SECRET is not set", file=sys.stderr)
        return 2
    print(issue_token(settings.jwt_secret, user, ttl_s=ttl_s, scope=scope))
    return 0
