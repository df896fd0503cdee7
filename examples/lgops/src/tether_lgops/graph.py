"""A plain LangGraph ops graph: the model looks services up and proposes restarts; a restart
waits for a person's approval (`interrupt()`), re-checks the service after it, and only then
calls the restart tool. Nothing here is Tether's but the effect declaration on the write tool
(tools.py): the same graph runs on LangGraph's own runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt

from tether_lgops import infra
from tether_lgops.tools import get_service_status, restart_service

SYSTEM = (
    "You are an ops assistant. Check a service's status with get_service_status before acting; "
    "restart a service with restart_service only when it is not healthy. A person approves "
    "every restart."
)
TOOLS = [get_service_status, restart_service]


def _api_key() -> str:
    path = os.environ.get("TETHER_OPENAI_API_KEY_FILE", "")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get("TETHER_OPENAI_API_KEY") or os.environ.get("OPENAI_API_KEY") or "unset"


def chat_model() -> ChatOpenAI:
    """LangChain's OpenAI chat model, pointed at the provider Tether is configured with."""
    return ChatOpenAI(
        model=os.environ.get("TETHER_OPENAI_MODEL", "gpt-4o-mini"),
        base_url=os.environ.get("TETHER_OPENAI_BASE_URL") or None,
        api_key=_api_key(),  # type: ignore[arg-type]
        streaming=True,
        max_retries=2,
        timeout=60,
    )


model = chat_model().bind_tools(TOOLS)


async def agent(state: MessagesState) -> dict[str, Any]:
    reply = await model.ainvoke([SystemMessage(SYSTEM), *state["messages"]])
    return {"messages": [reply]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    if not isinstance(last, AIMessage) or not last.tool_calls:
        return END
    if any(call["name"] == restart_service.name for call in last.tool_calls):
        return "approve"
    return "tools"


async def approve(state: MessagesState) -> dict[str, Any]:
    """Each restart the model asked for: a person approves it, the service is checked again
    (it may have recovered while the person decided), then the restart tool runs."""
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    out: list[ToolMessage] = []
    for call in last.tool_calls:
        if call["name"] != restart_service.name:
            out.append(await get_service_status.ainvoke(call))
            continue
        service = str(call["args"].get("service", ""))
        approved = interrupt(
            {
                "kind": "confirm_action",
                "title": f"Restart {service}",
                "risk": "high",
                "target": service,
                "tool": restart_service.name,
                "summary": f"service={service}",
                "action": "service.restart",
                "scope": service,
            }
        )
        if not approved:
            text = f"The restart of {service} was rejected; nothing was done."
        elif await infra.status_of(service) == "healthy":
            text = f"{service} is healthy now; it was not restarted."
        else:
            out.append(await restart_service.ainvoke(call))
            continue
        out.append(ToolMessage(text, tool_call_id=call["id"], name=call["name"]))
    return {"messages": out}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode([get_service_status]))
builder.add_node("approve", approve)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", "approve", END])
builder.add_edge("tools", "agent")
builder.add_edge("approve", "agent")
graph = builder.compile()
