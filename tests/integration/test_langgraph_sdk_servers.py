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
from tether_testkit.node import run_node
from tether_testkit.processes import LOG_DIR, Proc, free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
JS_SCRIPT = Path(__file__).parent / "js" / "langgraph_sdk_servers.mjs"
sys.path.insert(0, str(BENCH))

from tether_bench.langgraph_compare import ensure_langgraph_venv  # noqa: E402

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(420)]

GRAPH = "lgcompare"  # Tether's agent name, and the graph id in langgraph dev's langgraph.json
MODES = ["values", "updates", "messages-tuple", "custom"]
TOKENS = 12
ASK = {"messages": [{"role": "user", "content": f"stream {TOKENS} deltas"}]}
WRITE_PAUSE_S = 0.5  # inside the write: the second resume arrives while the first writes
REPORT: dict[str, dict[str, Any]] = {}


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


def graph_env(provider: str, ledger: Path) -> dict[str, str]:
    return {
        "TETHER_OPENAI_BASE_URL": provider,
        "TETHER_OPENAI_API_KEY": "test",
        "LGCOMPARE_FILE": str(ledger),
        "LGCOMPARE_WRITE_PAUSE_S": str(WRITE_PAUSE_S),
    }


def tether_server(
    work: Path, provider: str, admin_dsn: str, base_env: dict[str, str]
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
    agent_env = env_with_path(
        {**env, **graph_env(provider, ledger), "TETHER_AGENTS": "tether_bench.lgcompare:agent"},
        BENCH,
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
def langgraph_dev(work: Path, provider: str) -> Iterator[Booting]:
    """`langgraph dev` started (not waited for) before Tether's processes: both boot at once."""
    exe = ensure_langgraph_venv(ROOT / ".tether" / "bench" / "langgraph-venv")
    project = work / "lgdev"
    project.mkdir()
    graph = BENCH / "tether_bench" / "lgcompare_graph.py"
    (project / "langgraph.json").write_text(
        json.dumps({"dependencies": ["."], "graphs": {GRAPH: f"{graph}:graph"}})
    )
    ledger = work / "langgraph-dev.txt"
    port = free_port()
    log = (LOG_DIR / "lgsdk-langgraph-dev.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
        + ["--port", str(port), "--config", str(project / "langgraph.json")],
        cwd=project,
        env={
            **os.environ,
            **graph_env(provider, ledger),
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
    admin_dsn: str,
    base_env: dict[str, str],
    langgraph_dev: Booting,
) -> Iterator[Server]:
    """Each server once per module (its tests grouped by pytest)."""
    if request.param == "tether":
        yield from tether_server(work, provider, admin_dsn, base_env)
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
