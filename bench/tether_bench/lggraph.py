"""The LangGraph agent of the benchmark (TETHER_AGENTS=tether_bench.lggraph:agent): a plain
LangGraph graph whose one node calls LangChain's `ChatOpenAI`, streaming, against the benchmark's
fake provider (fake_provider.py), so it does the same work as the native agent in
`provider_stream`: one model call, N streamed tokens, N `text_delta` events."""

from __future__ import annotations

import os
from typing import Any

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from tether_langgraph import GraphAgent

model = ChatOpenAI(
    model=os.environ.get("TETHER_OPENAI_MODEL", "bench-model"),
    base_url=os.environ.get("TETHER_OPENAI_BASE_URL") or None,
    api_key=os.environ.get("TETHER_OPENAI_API_KEY") or "bench",  # type: ignore[arg-type]
    streaming=True,
    max_retries=0,
)


async def answer(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)

agent = GraphAgent(
    name="lgbench",
    description="The benchmark's LangGraph graph: one streamed model call.",
    graph=builder,
)
