"""GraphAgent: a LangGraph graph as one more kind of Tether agent.

    from tether_langgraph import GraphAgent
    agent = GraphAgent(name="ops", description="...", graph=builder)  # a StateGraph or compiled

TETHER_AGENTS names it like any agent (`package.module:agent`). The engine runs it through its
`drive(host)` seam (tether_runtime/engine/driven.py): the graph, checkpointed by Tether with the run's
conversation as LangGraph's thread, streams into Tether's events; `interrupt()` is a Tether
interrupt; write tools marked with `write_tool` run at most once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from tether_sdk import Agent, Model, ModelError, ModelRequest
from tether_sdk._model import Chunk, Provider


class GraphModel:
    """Stands where a native agent's model is: the graph calls its own models, so the engine
    never asks this one for a step."""

    provider = "langgraph"
    model = "graph"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Chunk]:
        for _ in ():
            yield ""
        raise ModelError("GRAPH_AGENT", "a LangGraph agent's models are called by its graph")


def _state_jsonschema(graph: Any) -> Any:
    """The state's schema: the builder's state type (a StateGraph's), else the output's."""
    state = getattr(getattr(graph, "builder", None), "state_schema", None)
    if state is None:
        return graph.get_output_jsonschema()
    from pydantic import TypeAdapter

    return TypeAdapter(state).json_schema()


def graph_agent(graph: Any, name: str, source: str = "") -> GraphAgent:
    """A compiled graph (or a StateGraph) loaded without a wrapper (`TETHER_AGENTS=mod:graph`, a
    langgraph.json): a GraphAgent with the default input and output, named `name`."""
    about = f"The LangGraph graph {name}" + (f" ({source})" if source else "")
    return GraphAgent(name=name, description=about, graph=graph)


def is_graph(obj: object) -> bool:
    """A LangGraph StateGraph or compiled graph (Pregel)."""
    from langgraph.graph import StateGraph
    from langgraph.pregel import Pregel

    return isinstance(obj, StateGraph | Pregel)


def _messages_input(text: str) -> Any:
    from langchain_core.messages import HumanMessage

    return {"messages": [HumanMessage(text)]}


@dataclass(frozen=True)
class GraphAgent(Agent):
    """An agent whose loop is a LangGraph graph. `graph`: a `StateGraph` (compiled here) or a
    compiled graph (its checkpointer is replaced by Tether's). `input(text)` turns the run's user
    message into the graph's input (default: `{"messages": [HumanMessage(text)]}`); `output(state)`
    gives the answer stored when the graph ends (default: the text of the last AI message in
    `state["messages"]`, else the text streamed)."""

    instructions: str = ""
    model: Model | Provider = field(default_factory=GraphModel)
    graph: Any = None
    input: Callable[[str], Any] = _messages_input
    output: Callable[[Any], str] | None = None

    def problems(self) -> list[str]:
        out = super().problems()
        from langgraph.graph import StateGraph
        from langgraph.pregel import Pregel

        if not isinstance(self.graph, StateGraph | Pregel):
            out.append(
                f"agent {self.name!r}: graph must be a LangGraph StateGraph or compiled graph, "
                f"not {type(self.graph).__name__}"
            )
        elif isinstance(self.graph, Pregel) and (
            self.graph.interrupt_before_nodes or self.graph.interrupt_after_nodes
        ):
            out.append(
                f"agent {self.name!r}: static breakpoints (interrupt_before/interrupt_after) "
                "carry no question for a person; call interrupt(payload) in the node instead"
            )
        return out

    def _base(self) -> Any:
        """The graph compiled once (a compiled graph as it is)."""
        from langgraph.graph import StateGraph

        base = self.__dict__.get("_compiled")
        if base is None:
            base = self.graph.compile() if isinstance(self.graph, StateGraph) else self.graph
            object.__setattr__(self, "_compiled", base)
        return base

    def compiled(self, checkpointer: Any) -> Any:
        """The graph with `checkpointer` (a compiled graph is compiled once, copied per run)."""
        return self._base().copy(update={"checkpointer": checkpointer})

    def json_schemas(self) -> dict[str, Any]:
        """The graph's input, output and state JSON Schemas (ListAgents; LangGraph's server
        gives the same from the compiled graph). A schema the graph cannot describe is left
        out."""
        graph = self._base()
        out: dict[str, Any] = {}
        for key, make in (
            ("input", graph.get_input_jsonschema),
            ("output", graph.get_output_jsonschema),
            ("state", lambda: _state_jsonschema(graph)),
        ):
            try:
                out[key] = make()
            except Exception:  # noqa: BLE001, S112 - a schema pydantic cannot build is omitted
                continue
        return out

    async def drive(self, host: Any) -> None:
        from tether_langgraph._driver import GraphRun

        await GraphRun(self, host).run()
