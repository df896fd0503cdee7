"""ONE script with LangGraph's official Python client (`langgraph-sdk`), unchanged, against two
servers of the LangGraph Agent Server API: Tether (one runtime, two gateway pods, at /langgraph)
and LangGraph's own `langgraph dev` (one process, in memory). The graph is the benchmark's
(bench/tether_bench/lgcompare_graph.py, loaded unmodified by both): `talk` streams "t0 ... t11"
from the benchmark's fake OpenAI provider, `act` asks `interrupt()` and then calls a write tool
that appends a line to a file (one line = one execution).

The script: stream to the interrupt on pod A; `join_stream` with `Last-Event-ID` on pod B from
several cut points, compared with the first stream's tail (event, data, id); two resumes at once
on pod B (a double click); the final state. On Tether every guarantee is asserted: unique event
ids, every join exact, the two resumes one execution and the same stream. On `langgraph dev` the
flow is asserted (stream, interrupt, resume, done) and the rest is measured, not asserted (LangGraph
does not promise it): the side-by-side table is printed in the session's summary and under -s,
and written as JSON (.tether/test-reports/langgraph_sdk_servers.json).

A second script checks fidelity on a graph nobody wrote for Tether (langgraph_graphs/
fidelity_graphs.py, both servers loading it from one langgraph.json): LangChain v1's
`create_agent` with the human-in-the-loop middleware, its model against the test kit's FakeOpenAI.
On each server: every `messages-tuple` chunk carries the id of the AI message the state ends up
with and the node whose `updates` wrote it (`model`), and the thread's state at the interrupt
names the middleware's node in `next` and `tasks`; Tether's figures are asserted equal to
`langgraph dev`'s. And an `@entrypoint` whose state is None, not a dict, runs through the mount.

LangGraph's server runs from the benchmark's virtualenv (langgraph_compare.ensure_langgraph_venv,
.tether/bench/langgraph-venv, ignored by git), created from PyPI on first use and kept."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from tether_common.auth import issue_token
from tether_testkit import reports, stores
from tether_testkit.agent_packages import env_with_path
from tether_testkit.fake_llm import FakeCall, Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.node import run_node
from tether_testkit.processes import LOG_DIR, Proc, free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
JS_SCRIPT = Path(__file__).parent / "js" / "langgraph_sdk_servers.mjs"
FIDELITY_GRAPHS = Path(__file__).parent / "langgraph_graphs" / "fidelity_graphs.py"
sys.path.insert(0, str(BENCH))

from tether_bench.langgraph_compare import ensure_langgraph_venv  # noqa: E402

pytestmark = [pytest.mark.process, pytest.mark.slow(seconds=28), pytest.mark.timeout(420)]

GRAPH = "lgcompare"  # Tether's agent name, and the graph id in langgraph dev's langgraph.json
MODES = ["values", "updates", "messages-tuple", "custom"]
TOKENS = 12
ASK = {"messages": [{"role": "user", "content": f"stream {TOKENS} deltas"}]}
WRITE_PAUSE_S = 0.5  # inside the write: the second resume arrives while the first writes
REPORT: dict[str, dict[str, Any]] = {}
FIDELITY: dict[str, dict[str, Any]] = {}  # what the fidelity script saw, by server
MAIL_MODES = ["values", "updates", "messages-tuple"]
HITL_NODE = "HumanInTheLoopMiddleware.after_model"


@dataclass
class Server:
    name: str
    urls: tuple[str, str]  # pod A, pod B (the same for a single process)
    ledger: Path
    headers: dict[str, str] = field(default_factory=dict)
    strict: bool = False  # Tether's guarantees asserted

    def client(self, pod: int) -> LangGraphClient:
        return get_client(url=self.urls[pod], headers=self.headers)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lgsdk")


@pytest.fixture(scope="module")
def provider(work: Path) -> Iterator[str]:
    """The benchmark's fake OpenAI provider: "stream N deltas" -> "t0 ", "t1 ", ..."""
    port = free_port()
    log = (LOG_DIR / "lgsdk-provider.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether_bench.fake_provider", str(port)],
        env=env_with_path(dict(os.environ), BENCH),
        stdout=log,
        stderr=log,
    )
    try:
        _wait_http(f"http://127.0.0.1:{port}/v1/models", proc, 30, any_status=True)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def _mail_brain(body: dict[str, Any]) -> Reply:
    """The `mail` graph's model: send_email first; once the tool's result is in, the answer."""
    last = (body.get("messages") or [{}])[-1]
    if last.get("role") == "tool":
        return Reply(text="The email to Bob is sent.")
    return Reply(
        text="I will email Bob now.",
        calls=[FakeCall("send_email", {"to": "bob@example.com", "subject": "lunch"})],
    )


@pytest.fixture(scope="module")
async def mail_model() -> AsyncIterator[str]:
    """The test kit's FakeOpenAI, in this process (both servers' `mail` graph call it)."""
    async with FakeOpenAI(brain=_mail_brain) as llm:
        yield llm.base_url


def graphs_json(work: Path, with_lgcompare: bool) -> Path:
    """A langgraph.json of the fidelity graphs (and the comparison graph, for langgraph dev)."""
    graphs = {"mail": f"{FIDELITY_GRAPHS}:mail", "noop": f"{FIDELITY_GRAPHS}:noop"}
    if with_lgcompare:
        graphs[GRAPH] = f"{BENCH / 'tether_bench' / 'lgcompare_graph.py'}:graph"
    folder = work / ("lgdev" if with_lgcompare else "tether-graphs")
    folder.mkdir(exist_ok=True)
    path = folder / "langgraph.json"
    path.write_text(json.dumps({"dependencies": ["."], "graphs": graphs}))
    return path


def graph_env(provider: str, ledger: Path, mail_model: str) -> dict[str, str]:
    return {
        "LGFIDELITY_OPENAI_BASE_URL": mail_model,
        "TETHER_OPENAI_BASE_URL": provider,
        "TETHER_OPENAI_API_KEY": "test",
        "LGCOMPARE_FILE": str(ledger),
        "LGCOMPARE_WRITE_PAUSE_S": str(WRITE_PAUSE_S),
    }


def tether_server(
    work: Path, provider: str, mail_model: str, admin_dsn: str, base_env: dict[str, str]
) -> Iterator[Server]:
    import asyncpg
    from tether_runtime.store import grants

    async def fresh() -> str:
        dsn = await stores.create_fresh_database(admin_dsn)
        conn = await asyncpg.connect(dsn)
        try:
            await grants.add(conn, "alice", "file.append", "*")
        finally:
            await conn.close()
        return dsn

    dsn = asyncio.run(fresh())
    ledger = work / "tether.txt"
    env = {**base_env, "DATABASE_URL": dsn}
    agents = f"tether_bench.lgcompare:agent,{graphs_json(work, with_lgcompare=False)}"
    agent_env = env_with_path(
        {**env, **graph_env(provider, ledger, mail_model), "TETHER_AGENTS": agents}, BENCH
    )
    procs: list[Proc] = []
    try:
        runtime = start_runtime(agent_env, name="runtime-lgsdk", timeout=90)
        procs.append(runtime)
        for pod in ("a", "b"):
            procs.append(start_gateway(env, runtime.addr, name=f"gateway-lgsdk-{pod}"))
        token = issue_token(TEST_SECRET, "alice")
        yield Server(
            "tether",
            (f"{procs[1].addr}/langgraph", f"{procs[2].addr}/langgraph"),
            ledger,
            {"Authorization": f"Bearer {token}"},
            strict=True,
        )
    finally:
        for p in procs:
            p.kill()
        asyncio.run(stores.drop_database(admin_dsn, dsn))


@dataclass
class Booting:
    proc: subprocess.Popen[bytes]
    url: str
    ledger: Path


@pytest.fixture(scope="module")
def langgraph_dev(work: Path, provider: str, mail_model: str) -> Iterator[Booting]:
    """`langgraph dev` started (not waited for) before Tether's processes: both boot at once."""
    exe = ensure_langgraph_venv(ROOT / ".tether" / "bench" / "langgraph-venv")
    config = graphs_json(work, with_lgcompare=True)
    project = config.parent
    ledger = work / "langgraph-dev.txt"
    port = free_port()
    log = (LOG_DIR / "lgsdk-langgraph-dev.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
        + ["--port", str(port), "--config", str(config)],
        cwd=project,
        env={
            **os.environ,
            **graph_env(provider, ledger, mail_model),
            "LANGSMITH_TRACING": "false",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        },
        stdout=log,
        stderr=log,
    )
    try:
        yield Booting(proc, f"http://127.0.0.1:{port}", ledger)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module", params=["tether", "langgraph-dev"])
def server(
    request: pytest.FixtureRequest,
    work: Path,
    provider: str,
    mail_model: str,
    admin_dsn: str,
    base_env: dict[str, str],
    langgraph_dev: Booting,
) -> Iterator[Server]:
    """Each server once per module (its tests grouped by pytest)."""
    if request.param == "tether":
        yield from tether_server(work, provider, mail_model, admin_dsn, base_env)
    else:
        _wait_http(f"{langgraph_dev.url}/ok", langgraph_dev.proc, 120)
        url = langgraph_dev.url
        yield Server("langgraph dev", (url, url), langgraph_dev.ledger)


@pytest.fixture(scope="module", autouse=True)
def side_by_side() -> Iterator[None]:
    """The figures of both servers as one table, at the end of the module."""
    yield
    if not REPORT:
        return
    names = list(REPORT)
    labels = list(dict.fromkeys(label for figures in REPORT.values() for label in figures))
    rows = [[label, *(REPORT[n].get(label, "") for n in names)] for label in labels]
    title = "langgraph-sdk script, side by side (measured; Tether's asserted)"
    reports.write("langgraph_sdk_servers", title, names, rows)
    print("\n" + "\n".join([title, *reports.render({"columns": names, "rows": rows})]))


def _wait_http(url: str, proc: subprocess.Popen[bytes], limit_s: float, any_status=False) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{url}: the process exited ({proc.returncode}); see {LOG_DIR}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            if any_status:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready after {limit_s} s; see {LOG_DIR}")


def wire(parts: list[Any]) -> list[tuple[str, Any, str | None]]:
    return [(p.event, p.data, p.id) for p in parts]


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [part async for part in stream]


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def text_of(parts: list[Any]) -> str:
    return "".join(
        str(p.data[0].get("content", ""))
        for p in parts
        if p.event == "messages" and p.data[0].get("type") in ("AIMessageChunk", "ai")
    )


async def the_script(s: Server) -> dict[str, Any]:
    """The flow, against either server; what it saw, for the assertions and the table."""
    a, b = s.client(0), s.client(1)
    seen: dict[str, Any] = {}
    try:
        t = (await a.threads.create())["thread_id"]
        first = await collect(
            a.runs.stream(t, GRAPH, input=ASK, stream_mode=MODES, stream_resumable=True)
        )
        run_id = first[0].data["run_id"]
        updates = [p.data for p in first if p.event == "updates"]
        seen["first"] = first
        seen["interrupt"] = (updates[-1].get("__interrupt__") or [None])[0] if updates else None
        seen["text"] = text_of(first)
        seen["paused_run"] = (await b.runs.get(t, run_id))["status"]
        seen["paused_thread"] = (await b.threads.get(t))["status"]

        n = len(first)
        joins = []
        for cut in sorted({0, 1, n // 2, n - 1, n}):
            last = "0" if cut == 0 else first[cut - 1].id
            try:
                joined = await collect(
                    b.runs.join_stream(t, run_id, stream_mode=MODES, last_event_id=last)
                )
                joins.append((cut, wire(joined) == wire(first[cut:]), ""))
            except Exception as err:  # noqa: BLE001 - the server's answer is the measurement
                joins.append((cut, False, f"{type(err).__name__}: {str(err)[:80]}"))
        seen["joins"] = joins

        before = lines(s.ledger)
        resumes = await asyncio.gather(
            *(
                collect(b.runs.stream(t, GRAPH, command={"resume": True}, stream_mode=MODES))
                for _ in range(2)
            ),
            return_exceptions=True,
        )
        seen["resumes"] = resumes
        deadline = time.monotonic() + 10
        while lines(s.ledger) <= before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(WRITE_PAUSE_S + 1)  # a second execution, if any, writes meanwhile
        seen["executions"] = lines(s.ledger) - before
        for _ in range(100):
            seen["thread"] = (await a.threads.get(t))["status"]
            if seen["thread"] == "idle":
                break
            await asyncio.sleep(0.1)
        seen["final"] = (await a.threads.get_state(t))["values"]
        seen["runs"] = [(r["run_id"], r["status"]) for r in await a.runs.list(t)]
    finally:
        for c in (a, b):
            await c.aclose()
    return seen


def report(s: Server, sdk: str, figures: dict[str, Any]) -> None:
    """One client's figures on one server, for the side-by-side table."""
    REPORT.setdefault(s.name, {}).update({f"{sdk}: {k}": v for k, v in figures.items()})


def figures(
    ids: list[str], exact: list[bool], answered: int, same: bool, executions: int, answer: Any
) -> dict[str, Any]:
    return {
        "events in the first stream": len(ids),
        "events sharing an id": len(ids) - len(set(ids)),
        "exact joins (Last-Event-ID cuts)": f"{sum(exact)}/{len(exact)}",
        "resumes answered (of 2 at once)": answered,
        "resume streams identical": same,
        "write executions (2 resumes)": executions,
        "final answer": answer,
    }


async def test_the_sdk_script_on_each_server(server: Server) -> None:
    seen = await the_script(server)
    ok = [r for r in seen["resumes"] if not isinstance(r, BaseException)]
    same = len(ok) == 2 and wire(ok[0]) == wire(ok[1])
    exact = [e for _, e, _ in seen["joins"]]
    answer = seen["final"]["messages"][-1]["content"]
    ids = [p.id for p in seen["first"]]
    report(server, "py", figures(ids, exact, len(ok), same, seen["executions"], answer))
    # The flow, on both: streamed, paused at the interrupt, resumed, done.
    first = seen["first"]
    assert first[0].event == "metadata", [p.event for p in first]
    assert seen["text"] == "".join(f"t{i} " for i in range(TOKENS)), seen["text"]
    assert seen["interrupt"] and seen["interrupt"]["value"]["kind"] == "confirm_action"
    assert first[-1].event == "values" and first[-1].data["__interrupt__"] == [seen["interrupt"]]
    assert seen["paused_run"] == "success" and seen["paused_thread"] == "interrupted"
    assert any(not isinstance(r, BaseException) for r in seen["resumes"]), seen["resumes"]
    assert seen["executions"] >= 1
    assert seen["final"]["messages"][-1]["content"] == "appended", seen["final"]
    assert seen["thread"] == "idle"
    if not server.strict:
        return
    # Tether's guarantees: every event its own id, every join exactly the tail after its cursor
    # on the other pod, two resumes at once one execution and one stream.
    ids = [p.id for p in first]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert all(exact for _, exact, _ in seen["joins"]), seen["joins"]
    r1, r2 = seen["resumes"]
    assert not isinstance(r1, BaseException) and not isinstance(r2, BaseException)
    assert wire(r1) == wire(r2)
    assert r1[0].event == "metadata" and r1[0].data["run_id"] != first[0].data["run_id"]
    assert seen["executions"] == 1
    assert [status for _, status in seen["runs"]] == ["success", "success"]


async def test_the_js_sdk_script_on_each_server(server: Server) -> None:
    """The same flow with `@langchain/langgraph-sdk` (js/langgraph_sdk_servers.mjs)."""
    token = server.headers.get("Authorization", "").removeprefix("Bearer ")
    before = lines(server.ledger)
    r = await run_node(str(JS_SCRIPT), *server.urls, token, GRAPH, str(TOKENS))
    await asyncio.sleep(WRITE_PAUSE_S + 1)  # a second execution, if any, writes meanwhile
    executions = lines(server.ledger) - before
    exact = [j["exact"] for j in r["joins"]]
    same = bool(r["resumesEqual"])
    report(
        server,
        "js",
        figures(r["ids"], exact, r["resumesAnswered"], same, executions, r["finalAnswer"]),
    )
    # The flow, on both.
    assert r["events"][0] == "metadata", r["events"]
    assert r["text"] == "".join(f"t{i} " for i in range(TOKENS)), r["text"]
    assert r["interruptKind"] == "confirm_action" and r["lastIsStateWithInterrupt"]
    assert r["pausedRun"] == "success" and r["pausedThread"] == "interrupted"
    assert r["resumesAnswered"] >= 1, r["resumeErrors"]
    assert executions >= 1
    assert r["finalAnswer"] == "appended" and r["threadStatus"] == "idle"
    if not server.strict:
        return
    assert all(r["ids"]) and len(set(r["ids"])) == len(r["ids"]), r["ids"]
    assert all(exact), r["joins"]
    assert r["resumesAnswered"] == 2 and same and r["resumedNewRun"], r["resumeErrors"]
    assert executions == 1
    assert r["runs"] == ["success", "success"]


async def fidelity_script(s: Server) -> dict[str, Any]:
    """The `mail` graph (create_agent + HITL) to its interrupt, the state there, an approval,
    the final state; and the `noop` @entrypoint (a state that is None) by runs.wait."""
    a = s.client(0)
    seen: dict[str, Any] = {}
    try:
        t = (await a.threads.create())["thread_id"]
        ask = {"messages": [{"role": "user", "content": "email Bob about lunch"}]}
        parts = await collect(a.runs.stream(t, "mail", input=ask, stream_mode=MAIL_MODES))
        paused = await a.threads.get_state(t)
        approve = {"resume": {"decisions": [{"type": "approve"}]}}
        parts += await collect(a.runs.stream(t, "mail", command=approve, stream_mode=MAIL_MODES))
        final = await a.threads.get_state(t)
        said = [p.data for p in parts if p.event == "messages"]
        chunks = [
            (m["id"], meta["langgraph_node"], m["content"])
            for m, meta in said
            if m.get("type") in ("AIMessageChunk", "ai") and m.get("content")
        ]
        # Messages not streamed but returned by a node (the tool's result), whole, by node.
        seen["returned"] = [
            (m["type"], meta["langgraph_node"], m["content"])
            for m, meta in said
            if m.get("type") not in ("AIMessageChunk", "ai")
        ]
        written: dict[str, str] = {}  # the node whose update first wrote each AI message
        for p in parts:  # (the middleware's node writes the message again, approved)
            for node, update in p.data.items() if p.event == "updates" else ():
                for m in update.get("messages") or [] if isinstance(update, dict) else []:
                    if m.get("type") == "ai":
                        written.setdefault(m["id"], node)
        seen["chunks"] = chunks
        seen["written"] = written
        seen["ai_ids"] = [m["id"] for m in final["values"]["messages"] if m["type"] == "ai"]
        seen["ai_texts"] = [m["content"] for m in final["values"]["messages"] if m["type"] == "ai"]
        seen["next"] = paused["next"]
        seen["tasks"] = [(task["name"], bool(task["interrupts"])) for task in paused["tasks"]]
        seen["interrupt_keys"] = (
            sorted(paused["interrupts"][0]["value"]) if paused["interrupts"] else []
        )
        seen["final_next"] = final["next"]

        t2 = (await a.threads.create())["thread_id"]
        seen["noop_wait"] = await a.runs.wait(t2, "noop", input={"anything": 1})
        seen["noop_state"] = (await a.threads.get_state(t2))["values"]
        seen["noop_thread"] = (await a.threads.get(t2))["status"]
    finally:
        await a.aclose()
    return seen


async def test_a_create_agent_graph_streams_its_messages_and_nodes_as_langgraph(
    server: Server,
) -> None:
    seen = await fidelity_script(server)
    FIDELITY[server.name] = seen
    chunk_ids = list(dict.fromkeys(i for i, _, _ in seen["chunks"]))
    chunk_nodes = sorted({n for _, n, _ in seen["chunks"]})
    REPORT.setdefault(server.name, {}).update(
        {
            "mail: AI messages streamed (chunk ids = state ids)": (
                f"{len(set(chunk_ids) & set(seen['ai_ids']))}/{len(seen['ai_ids'])}"
            ),
            "mail: chunk langgraph_node": ",".join(chunk_nodes),
            "mail: messages returned by a node": ",".join(
                f"{k}@{n}" for k, n, _ in seen["returned"]
            ),
            "mail: state next at the interrupt": ",".join(seen["next"]),
            "noop (@entrypoint, state None): runs.wait": repr(seen["noop_wait"]),
        }
    )
    # Each chunk belongs to a message the final state has, by its id, and names the node whose
    # update wrote that message; both AI messages were streamed, whole.
    assert chunk_ids == seen["ai_ids"], (seen["chunks"], seen["ai_ids"])
    for message_id, node, _ in seen["chunks"]:
        assert seen["written"][message_id] == node == "model", (seen["chunks"], seen["written"])
    for message_id, text in zip(seen["ai_ids"], seen["ai_texts"], strict=True):
        assert "".join(c for i, _, c in seen["chunks"] if i == message_id) == text
    assert seen["ai_texts"] == ["I will email Bob now.", "The email to Bob is sent."]
    assert seen["returned"] == [("tool", "tools", "sent to bob@example.com: lunch")]
    # At the interrupt the state names the middleware's node, whose task holds the interrupt.
    assert seen["next"] == [HITL_NODE], seen["next"]
    assert seen["tasks"] == [(HITL_NODE, True)], seen["tasks"]
    assert seen["interrupt_keys"] == ["action_requests", "review_configs"]
    assert seen["final_next"] == []
    # A state that is no dict: through runs.wait and the thread's state.
    assert seen["noop_wait"] is None and seen["noop_state"] is None, seen
    assert seen["noop_thread"] == "idle"
    # Tether and langgraph dev agree on all of it (the ids are each server's own).
    other = next((v for k, v in FIDELITY.items() if k != server.name), None)
    if other is not None:
        keys = ("next", "tasks", "interrupt_keys", "ai_texts", "returned", "noop_wait")
        for key in (*keys, "noop_state"):
            assert seen[key] == other[key], (key, seen[key], other[key])
        # The same text from the same nodes (LangGraph sends a chunk per token, Tether coalesces).
        assert merged(seen["chunks"]) == merged(other["chunks"]), (seen["chunks"], other["chunks"])


def merged(chunks: list[tuple[str, str, str]]) -> list[tuple[str, str]]:
    """Each streamed message's node and whole text, in order."""
    out: dict[str, tuple[str, str]] = {}
    for message_id, node, text in chunks:
        out[message_id] = (node, out.get(message_id, (node, ""))[1] + text)
    return list(out.values())
