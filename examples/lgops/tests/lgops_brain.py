"""The fake model behind the ops graph's ChatOpenAI in the tests: scripted by what it is sent."""

from __future__ import annotations

from typing import Any

from tether_testkit.fake_llm import FakeCall, Reply


def ops_brain(body: dict[str, Any]) -> Reply:
    """The "model": checks the service, proposes a restart if it is not healthy, then reports."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    content = str(last.get("content") or "")
    if last.get("role") == "tool":
        if "is degraded" in content or "is down" in content:
            return Reply(
                text="checkout is degraded; I will restart it. ",
                calls=[FakeCall("restart_service", {"service": "checkout"})],
            )
        if "was restarted" in content:
            return Reply(text="Done: checkout was restarted and is healthy again.")
        return Reply(text=f"Nothing restarted: {content}")
    return Reply(
        text="Let me check checkout first. ",
        calls=[FakeCall("get_service_status", {"service": "checkout"})],
    )
