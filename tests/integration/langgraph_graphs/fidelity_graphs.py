"""Graphs nobody wrote for Tether, loaded unmodified by Tether and by `langgraph dev` from one
langgraph.json (test_langgraph_sdk_servers.py):

- `mail`: LangChain v1's `create_agent` with a `send_email` tool under the human-in-the-loop
  middleware (its node `model` streams the answer; `HumanInTheLoopMiddleware.after_model`
  interrupts before the tool runs). The model is ChatOpenAI against the test kit's FakeOpenAI
  (LGFIDELITY_OPENAI_BASE_URL): it calls send_email, then answers once the tool's result is in.
- `noop`: an `@entrypoint` whose state (its return value) is None, not a dict."""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.func import entrypoint


@tool
def send_email(to: str, subject: str) -> str:
    """Send an email to `to` with the subject `subject`."""
    return f"sent to {to}: {subject}"


model = ChatOpenAI(
    model="fake-model",
    base_url=os.environ.get("LGFIDELITY_OPENAI_BASE_URL") or None,
    api_key="test",  # type: ignore[arg-type]
    streaming=True,
    max_retries=0,
)

mail = create_agent(
    model,
    tools=[send_email],
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"send_email": True})],
)


@entrypoint()
def noop(inputs: Any) -> None:
    return None
