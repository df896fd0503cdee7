"""The graph's LangChain tools. The read tool is plain LangChain; the write tool carries its
effect declaration (`write_tool`): the one change a graph needs to keep a write at most once on
Tether."""

from __future__ import annotations

import asyncio
import os

from langchain_core.tools import tool
from tether_langgraph import idempotency_key, write_tool

from tether_lgops import infra


@tool
async def get_service_status(service: str) -> str:
    """Get a service's health: healthy, degraded or down."""
    status = await infra.status_of(service)
    return f"{service} is {status}" if status else f"there is no service named {service}"


@write_tool(action="service.restart", scope="{service}")
@tool
async def restart_service(service: str) -> str:
    """Restart a service (it drops its connections for a moment)."""
    await infra.restart(service, idempotency_key())
    # Only for the crash tests: a pause after the effect, inside the call.
    await asyncio.sleep(float(os.environ.get("LGOPS_RESTART_PAUSE_S") or 0))
    return f"{service} was restarted"
