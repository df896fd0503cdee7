"""A small real graph for the checkpointer's tests: `draft` writes a proposal, `act` asks for
approval with `interrupt()` and records the answer. Run as a script, it resumes a thread with
`Command(resume=...)` from a process and a saver of its own:

    python approval_graph.py DSN THREAD_ID ANSWER   -> prints the final state as JSON
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt


class State(TypedDict, total=False):
    request: str
    proposal: str
    answer: str
    done: bool


def draft(state: State) -> State:
    return {"proposal": f"restart {state['request']}"}


def act(state: State) -> State:
    answer = interrupt({"kind": "confirm_action", "proposal": state["proposal"]})
    return {"answer": answer, "done": True}


def build(checkpointer: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
    graph = StateGraph(State)
    graph.add_node("draft", draft)
    graph.add_node("act", act)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "act")
    graph.add_edge("act", END)
    return graph.compile(checkpointer=checkpointer)


async def resume(dsn: str, thread_id: str, answer: str) -> dict[str, Any]:
    from tether_langgraph.checkpointer import TetherCheckpointer
    from tether_runtime.store.db import create_pool

    pool = await create_pool(dsn, min_size=1, max_size=2)
    try:
        graph = build(TetherCheckpointer(pool))
        config = {"configurable": {"thread_id": thread_id}}
        result: dict[str, Any] = await graph.ainvoke(Command(resume=answer), config)
        return result
    finally:
        await pool.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(resume(sys.argv[1], sys.argv[2], sys.argv[3]))))
