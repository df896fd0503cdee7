"""The graph of the LangGraph-server-vs-Tether comparison (langgraph_compare.py), run unmodified
by both: LangGraph's dev server loads this file by path (langgraph.json), Tether as the agent
`tether_bench.lgcompare:agent`. `talk` streams the model's answer (LangChain's ChatOpenAI against
the benchmark's fake provider); `act` asks a person (`interrupt()`) and then calls the write
tool, which appends one line to the file LGCOMPARE_FILE and pauses LGCOMPARE_WRITE_PAUSE_S inside
the call, so that a second run can arrive while the write is in progress. Each line in the file
is one execution of the write."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt
from tether_langgraph import write_tool

model = ChatOpenAI(
    model="bench-model",
    base_url=os.environ.get("TETHER_OPENAI_BASE_URL") or None,
    api_key=os.environ.get("TETHER_OPENAI_API_KEY") or "bench",  # type: ignore[arg-type]
    streaming=True,
    max_retries=0,
)


@write_tool(action="file.append")
@tool
async def append_line(text: str) -> str:
    """Append one line to the comparison's file (the "dangerous" write)."""
    with open(os.environ["LGCOMPARE_FILE"], "a") as f:  # noqa: ASYNC230 - one short line
        f.write(text + "\n")
    await asyncio.sleep(float(os.environ.get("LGCOMPARE_WRITE_PAUSE_S") or 0))
    return "appended"


async def talk(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


async def act(state: MessagesState) -> dict[str, Any]:
    approved = interrupt(
        {
            "kind": "confirm_action",
            "title": "Append a line",
            "risk": "high",
            "target": "the file",
            "summary": "append one line",
        }
    )
    if not approved:
        return {"messages": [AIMessage("rejected: nothing appended")]}
    result = await append_line.ainvoke({"text": "executed"})
    return {"messages": [AIMessage(str(result))]}


builder = StateGraph(MessagesState)
builder.add_node("talk", talk)
builder.add_node("act", act)
builder.add_edge(START, "talk")
builder.add_edge("talk", "act")
builder.add_edge("act", END)
graph = builder.compile()
