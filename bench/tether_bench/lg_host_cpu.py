"""CPU per streamed token of a LangGraph graph driven by Tether's host, in one process:
`PYTHONPATH=bench uv run --frozen python -m tether_bench.lg_host_cpu [--tokens N] [--reps R]
[--modes host,direct,floor,client,native] [--order]`.

The benchmark's graph (lggraph.py: one node, `ChatOpenAI` streaming N tokens from
fake_provider.py, a process of its own whose CPU is not counted) compiled with LangGraph's
InMemorySaver, driven by `GraphRun` with a host that does nothing (its `text` counts the tokens),
`time.process_time()` around each run, the median of R runs, in µs of CPU per token; the modes
alternate run by run.

- `host`: `GraphRun` as it is (the `messages` stream mode, through LangGraph's queue).
- `direct`: an experiment, not Tether's code: `messages` taken out of the stream modes and the
  tokens handed to `GraphRun._message` in the model's task by a callback handler of the host's
  (`_DirectTokens`: LangGraph's StreamMessagesHandler, its filters and dedupe kept). What that
  lever could save; it does not keep the host's guarantees (`--order` shows how).
- `floor`: the same graph through `graph.astream` with the `updates`, `values` and `custom` modes
  only and no host: the graph and the model client with no token streamed to anyone.
- `client`: the graph's `ChatOpenAI` alone (`astream` of the same prompt; no graph, no host).
- `native`: the runtime's `OpenAIProvider` alone, the client a native agent streams through
  (both clients on the `openai` SDK). `client` - `native` is what LangChain's client adds per token
  before LangGraph or Tether do anything: a floor of bench's `langgraph.overhead_us_per_event`
  (LangGraph agent - native agent) for any graph whose model is `ChatOpenAI`.

`--order`: a node that writes a custom event after each chunk it streams, and a sync node (run by
LangGraph in a worker thread), driven by `host` and by `direct`, with the order of the text (T),
custom (C) and update (U) events the host got, and the event loops its `text` ran on."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from typing import Any

from tether_sdk import Limits

from tether_bench.stack import free_port


class NullHost:
    """What GraphRun needs of its host, doing nothing: the tokens are counted."""

    def __init__(self, text: str) -> None:
        self.conversation_id = uuid.uuid4().hex
        self.run_id = uuid.uuid4().hex
        self.graph_input = None
        self.user_text = text
        self.pool = None
        self.epoch = 1
        self.tokens = 0

    async def text(self, delta: str, **_: Any) -> None:
        self.tokens += 1

    async def _nothing(self, *_: Any, **__: Any) -> None:
        return None

    flush = graph_update = graph_values = custom_data = node_done = _nothing
    tool_started = tool_finished = tool_progress = interrupt = _nothing

    async def answer(self, key: str) -> None:
        return None

    async def finish(self, text: str, values: Any) -> None:
        self.answer_text = text

    def lease_lost(self) -> None: ...

    def fail(self, *_: Any) -> None: ...


class RecordingHost(NullHost):
    """Records the order of text (T), custom (C) and update (U) events, and the loops of `text`."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.log: list[str] = []
        self.loops: set[int] = set()

    async def text(self, delta: str, **_: Any) -> None:
        self.loops.add(id(asyncio.get_running_loop()))
        if delta.strip():
            self.log.append("T" + delta.strip()[1:])

    async def custom_data(self, data: Any, step: int | None = None) -> None:
        self.log.append("C" + str(data.get("after", ""))[1:])

    async def graph_update(self, node: str, update: Any, step: int | None = None) -> None:
        self.log.append("U")


class Source:
    def __init__(self, graph: Any) -> None:
        from langgraph.checkpoint.memory import InMemorySaver

        self.graph = graph.compile(checkpointer=InMemorySaver())
        self.limits = Limits()
        self.output = None

    @property
    def input(self) -> Any:
        return lambda text: {"messages": [{"role": "user", "content": text}]}

    def compiled(self, checkpointer: Any) -> Any:
        return self.graph


def _direct_tokens(run: Any) -> Any:
    """The experiment's handler: LangGraph's StreamMessagesHandler (subgraphs=False semantics:
    a subgraph's models and nodes are left out), its items handed to `run._message` in the task
    that produced them instead of LangGraph's queue."""
    from uuid import uuid4

    from langchain_core.outputs import ChatGenerationChunk
    from langgraph.pregel._messages import StreamMessagesHandler, graph_namespace

    class DirectTokens(StreamMessagesHandler):
        def __init__(self) -> None:
            self.out: list[Any] = []
            # subgraphs=True: astream drops a caller's handler with subgraphs=False at the root
            super().__init__(self.out.append, subgraphs=True)

        def on_chat_model_start(self, *args: Any, metadata: Any = None, **kw: Any) -> Any:
            if not (metadata and graph_namespace(metadata)):
                super().on_chat_model_start(*args, metadata=metadata, **kw)

        def on_chain_start(self, *args: Any, metadata: Any = None, **kw: Any) -> Any:
            if not (metadata and kw.get("name") == metadata.get("langgraph_node")):
                return
            if not graph_namespace(metadata):
                super().on_chain_start(*args, metadata=metadata, **kw)

        async def drain(self) -> None:
            while self.out:
                _, _, (message, meta) = self.out.pop(0)
                await run._message(message, meta)

        async def on_llm_new_token(
            self, token: Any, *, chunk: Any = None, run_id: Any, **kw: Any
        ) -> None:
            if isinstance(chunk, ChatGenerationChunk) and (meta := self.metadata.get(run_id)):
                message = chunk.message
                if message.id is None:
                    message.id = str(uuid4())
                self.seen.add(message.id)
                await run._message(message, meta[1])

        async def on_llm_end(self, response: Any, *, run_id: Any, **kw: Any) -> None:
            super().on_llm_end(response, run_id=run_id, **kw)
            await self.drain()

        async def on_chain_end(self, response: Any, *, run_id: Any, **kw: Any) -> None:  # type: ignore[override]
            super().on_chain_end(response, run_id=run_id, **kw)
            await self.drain()

    return DirectTokens()


async def _drive(source: Source, host: NullHost, mode: str) -> None:
    from tether_langgraph import _driver

    run = _driver.GraphRun(source, host)
    if mode != "direct":
        await run.run()
        return
    run.config["callbacks"] = [_direct_tokens(run)]
    modes = _driver.STREAM_MODES
    _driver.STREAM_MODES = [m for m in modes if m != "messages"]
    try:
        await run.run()
    finally:
        _driver.STREAM_MODES = modes


async def _client(tokens: int, mode: str) -> float:
    """µs of CPU per token of a model client alone streaming `tokens` tokens: `client`, the
    bench graph's `ChatOpenAI` (`astream`, no graph, no callbacks of anyone's); `native`, the
    runtime's `OpenAIProvider` that a native agent streams through (both on the `openai` SDK)."""
    from langchain_core.messages import HumanMessage
    from tether_runtime.models.openai_provider import OpenAIProvider
    from tether_sdk import ModelRequest, OpenAICompatible

    from tether_bench import lggraph

    ask = f"stream {tokens} deltas"
    provider = None
    stream: Any
    if mode == "client":
        stream = (bool(c.content) async for c in lggraph.model.astream([HumanMessage(ask)]))
    else:
        provider = OpenAIProvider(
            OpenAICompatible(model="bench-model"),
            base_url=os.environ["OPENAI_BASE_URL"],
            api_key="bench",
        )
        request = ModelRequest("", "", [{"role": "user", "content": ask}], [])
        stream = (isinstance(piece, str) async for piece in provider.stream(request))
    try:
        start = time.process_time()
        got = sum([token async for token in stream])
        spent = time.process_time() - start
    finally:
        if provider is not None:
            await provider.aclose()
    if got < tokens:
        raise SystemExit(f"{mode}: {got} tokens of {tokens}")
    return spent / tokens * 1e6


async def _one(source: Source, tokens: int, mode: str) -> float:
    ask = f"stream {tokens} deltas"
    if mode in ("client", "native"):
        return await _client(tokens, mode)
    if mode == "floor":
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        start = time.process_time()
        async for _ in source.graph.astream(
            source.input(ask),
            config,
            stream_mode=["updates", "values", "custom"],
            durability="sync",
        ):
            pass
        return (time.process_time() - start) / tokens * 1e6
    host = NullHost(ask)
    start = time.process_time()
    await _drive(source, host, mode)
    spent = time.process_time() - start
    if host.tokens < tokens:
        raise SystemExit(f"{mode}: {host.tokens} tokens reached the host of {tokens}")
    return spent / tokens * 1e6


async def _cpu(tokens: int, reps: int, modes: list[str]) -> None:
    from tether_bench import lggraph

    source = Source(lggraph.builder)
    for mode in modes:  # warm up: imports, the HTTP connection
        await _one(source, 50, mode)
    runs: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(reps):
        for mode in modes:
            runs[mode].append(await _one(source, tokens, mode))
    for mode in modes:
        shown = " ".join(f"{r:.0f}" for r in runs[mode])
        print(f"{mode}: median {statistics.median(runs[mode]):.1f} µs CPU/token ({shown})")


def _order_graphs() -> dict[str, Any]:
    from langchain_openai import ChatOpenAI
    from langgraph.config import get_stream_writer
    from langgraph.graph import END, START, MessagesState, StateGraph

    model = ChatOpenAI(model="m", api_key="x", streaming=True, max_retries=0)  # type: ignore[arg-type]

    async def custom_per_chunk(state: MessagesState) -> dict[str, Any]:
        write, whole = get_stream_writer(), None
        async for chunk in model.astream(state["messages"]):
            if chunk.content:
                write({"after": str(chunk.content).strip()})
            whole = chunk if whole is None else whole + chunk
        return {"messages": [whole]}

    def sync_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graphs = {}
    for name, node in (("custom per chunk", custom_per_chunk), ("sync node", sync_node)):
        builder = StateGraph(MessagesState)
        builder.add_node("n", node)
        builder.add_edge(START, "n")
        builder.add_edge("n", END)
        graphs[name] = builder
    return graphs


async def _order() -> None:
    for name, builder in _order_graphs().items():
        for mode in ("host", "direct"):
            host = RecordingHost("stream 4 deltas")
            await _drive(Source(builder), host, mode)
            here = id(asyncio.get_running_loop())
            loops = "this loop" if host.loops == {here} else f"{len(host.loops - {here})} others"
            print(f"{name}, {mode}: {' '.join(host.log)} (text on {loops})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--modes", default="host,direct,floor", help="comma-separated")
    parser.add_argument("--order", action="store_true", help="show the order probe instead")
    args = parser.parse_args()
    asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> None:
    from tether_bench.main import _wait_port

    port = free_port()
    provider = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether_bench.fake_provider", str(port)
    )
    try:
        await _wait_port(port, 20)
        os.environ["OPENAI_BASE_URL"] = os.environ["TETHER_OPENAI_BASE_URL"] = (
            f"http://127.0.0.1:{port}/v1"
        )
        await (_order() if args.order else _cpu(args.tokens, args.reps, args.modes.split(",")))
    finally:
        provider.terminate()
        await provider.wait()


if __name__ == "__main__":
    main()
