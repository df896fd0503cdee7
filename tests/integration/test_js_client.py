"""The JS client (clients/js) as its users get it: its node unit suites, its TypeScript declarations
under `tsc`, its npm package, the copy the gateway serves (from the checkout and from the wheel),
its reconnects against a REAL gateway SIGKILLed and started again mid-run, and the README's Node
quickstart (docs/examples/client_quickstart.mjs) run exactly as written.

The reconnect suite is node's (clients/js/test/gateway); this module starts the runtime and a
gateway on a fixed address and serves it a control channel (POST /kill, POST /start) so the suite
kills and restarts the gateway at the moments it chooses: deterministic, no sleeps."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import asyncpg
import pytest
from tether_common.auth import issue_token
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import LOG_DIR, Proc, free_port, http_ready, start_runtime
from tether_testkit.secrets import TEST_SECRET

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "js"
QUICKSTART = ROOT / "docs" / "examples" / "client_quickstart.mjs"

pytestmark = [pytest.mark.timeout(300)]


def _node() -> str:
    node = shutil.which("node")
    assert node, "node (20+) is required for the JS client's tests"
    return node


def _run(
    args: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 120
) -> str:
    proc = subprocess.run(
        args,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return proc.stdout


def _node_tests(path: Path, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    out = _run([_node(), "--test", str(path)], env=env, timeout=timeout)
    assert "# fail 0" in out and "# cancelled 0" in out, out
    return out


def _sources() -> list[Path]:
    return sorted(p for p in (CLIENT / "src").iterdir() if p.is_file())


# ---- without a gateway ------------------------------------------------------------------------


def test_unit_suites_pass_under_node() -> None:
    out = _node_tests(CLIENT / "test" / "unit")
    passed = int(out.split("# pass ")[1].split()[0])
    assert passed >= 20, out


def test_declarations_type_a_real_program() -> None:
    """`tsc --noEmit` over the .d.ts and a program using them (clients/js/test/types)."""
    tsc = ROOT / "node_modules" / "typescript" / "bin" / "tsc"
    assert tsc.exists(), "typescript is a dev dependency of clients/js: run `npm ci` (make setup)"
    _run([_node(), str(tsc), "-p", str(CLIENT / "tsconfig.json")])


def test_npm_pack_holds_the_modules_and_their_types() -> None:
    npm = shutil.which("npm")
    assert npm, "npm is required"
    out = _run([npm, "pack", "--dry-run", "--json", "--ignore-scripts"], cwd=CLIENT)
    (pack,) = json.loads(out)
    assert pack["name"] == "@tether/client"
    files = {f["path"] for f in pack["files"]}
    expected = {f"src/{p.name}" for p in _sources()} | {"package.json", "README.md"}
    assert files == expected, files ^ expected
    manifest = json.loads((CLIENT / "package.json").read_text())
    assert manifest["type"] == "module"
    for entry in manifest["exports"].values():
        if isinstance(entry, dict):
            assert (CLIENT / entry["types"]).is_file() and (CLIENT / entry["default"]).is_file()
    assert (CLIENT / manifest["types"]).is_file()


def test_the_gateway_wheel_carries_the_client_source(tmp_path: Path) -> None:
    """The wheel (what the Docker image installs) serves the same bytes as clients/js/src."""
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is required to build the gateway's wheel"
    _run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT / "services" / "gateway")],
        timeout=180,
    )
    (wheel,) = tmp_path.glob("tether_gateway-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        packed = {
            n.removeprefix("tether_gateway/static/client/"): zf.read(n)
            for n in zf.namelist()
            if n.startswith("tether_gateway/static/client/")
        }
    assert packed == {p.name: p.read_bytes() for p in _sources()}


# ---- against a real gateway -------------------------------------------------------------------


class Stack:
    """A runtime, and a gateway on a fixed address that can be SIGKILLed and started again."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.runtime = start_runtime(env, name="rt-js")
        self.addr = f"127.0.0.1:{free_port()}"
        self.url = f"http://{self.addr}"
        self.gateway: Proc | None = None
        self.starts = 0
        self.start_gateway()

    def start_gateway(self) -> None:
        assert self.gateway is None or not self.gateway.alive(), "the gateway is already running"
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log_path = LOG_DIR / f"gateway-js-{os.getpid()}-{self.starts}.log"
        env = {**os.environ, **self.env, "TETHER_HTTP_ADDR": self.addr}
        env["TETHER_RUNTIME_TARGET"] = self.runtime.addr
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "tether_cli.main", "gateway"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.gateway = Proc(name="gateway-js", popen=popen, log_path=log_path, addr=self.url)
        deadline = time.monotonic() + 30
        while not http_ready(self.url):
            assert self.gateway.alive(), self.gateway.log()
            assert time.monotonic() < deadline, f"gateway not ready:\n{self.gateway.log()}"
            time.sleep(0.05)

    def kill_gateway(self) -> None:
        assert self.gateway is not None and self.gateway.alive(), "no gateway to kill"
        self.gateway.popen.send_signal(signal.SIGKILL)
        self.gateway.popen.wait(10)

    def stop(self) -> None:
        if self.gateway is not None and self.gateway.alive():
            self.gateway.terminate()
        self.runtime.terminate()


def _control_server(stack: Stack) -> ThreadingHTTPServer:
    """POST /kill and POST /start, answered once done: the node suite's hands on the gateway."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            action = {"/kill": stack.kill_gateway, "/start": stack.start_gateway}.get(self.path)
            status, body = 404, b"unknown action"
            if action is not None:
                try:
                    with lock:
                        action()
                    status, body = 200, b"ok"
                except Exception as err:  # noqa: BLE001 - reported to the suite, which fails
                    status, body = 500, repr(err).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """Its own seeded database: the quickstart restarts the demo's abnormal payment-api-2."""
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield dsn
    asyncio.run(stores.drop_database(admin_dsn, dsn))


# A LangGraph graph over a dict state beside OpsPilot: the client's `input` and `value`.
GRAPH = """
import operator
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class Ticket(TypedDict, total=False):
    title: str
    priority: int
    notes: Annotated[list[str], operator.add]
    decision: Any


def triage(state):
    return {"notes": [f"triaged {state['title']}"], "priority": state.get("priority", 1) + 1}


def ask(state):
    return {"decision": interrupt({"title": f"Escalate {state['title']}?", "target": "queue/ops"})}


builder = StateGraph(Ticket)
builder.add_node("triage", triage)
builder.add_node("ask", ask)
builder.add_edge(START, "triage")
builder.add_edge("triage", "ask")
builder.add_edge("ask", END)
jsgraph = builder.compile()
"""


@pytest.fixture(scope="module")
def stack(
    fresh_database: str, base_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    packages = tmp_path_factory.mktemp("jsgraph")
    write_package(packages, "jsgraph_pkg", GRAPH)
    env = {
        **base_env,
        "DATABASE_URL": fresh_database,
        "TETHER_SCRIPTED_DELAY_S": "0.01",
        "TETHER_SSE_RETRY_MS": "100",  # the client's first reconnect waits the server's `retry:`
        "TETHER_AGENTS": "jsgraph_pkg:jsgraph",
    }
    s = Stack(env_with_path(env, packages))
    yield s
    s.stop()


async def _services(dsn: str, n: int) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [(await abnormal_service(conn, prefix="js"))[0] for _ in range(n)]
    finally:
        await conn.close()


def test_the_gateway_serves_the_client_source_itself(stack: Stack) -> None:
    """/static/client/ is clients/js/src, byte for byte, as JavaScript (module scripts need it)."""
    for path in _sources():
        with urllib.request.urlopen(f"{stack.url}/static/client/{path.name}", timeout=5) as resp:
            assert resp.read() == path.read_bytes(), path.name
            if path.name.endswith(".js") and not path.name.endswith(".d.ts"):
                assert "javascript" in resp.headers["Content-Type"], resp.headers["Content-Type"]
    with urllib.request.urlopen(f"{stack.url}/static/app.js", timeout=5) as resp:
        assert b'from "./client/index.js"' in resp.read()


def test_reconnects_against_a_gateway_killed_and_restarted(
    stack: Stack, fresh_database: str
) -> None:
    services = asyncio.run(_services(fresh_database, 4))
    control = _control_server(stack)
    try:
        env = {
            "TETHER_GATEWAY_URL": stack.url,
            "TETHER_CONTROL_URL": f"http://127.0.0.1:{control.server_address[1]}",
            "TETHER_TOKEN": issue_token(TEST_SECRET, "alice"),
            # Two more logins of alice: one the suite signs out, the one it signs in with then.
            "TETHER_FRESH_TOKENS": ",".join(issue_token(TEST_SECRET, "alice") for _ in range(2)),
            "TETHER_SERVICES": ",".join(services),
        }
        out = _node_tests(CLIENT / "test" / "gateway", env=env, timeout=240)
    finally:
        control.shutdown()
        control.server_close()
    assert "# pass 5" in out, out
    assert stack.starts >= 3, "the suite killed and restarted the gateway"


def test_graph_input_and_resume_value_against_the_gateway(stack: Stack) -> None:
    """startRun's `input` and resume's `value` through a real gateway to a LangGraph graph
    (clients/js/test/graph): the input whole in the state, the value exactly interrupt()'s."""
    env = {"TETHER_GATEWAY_URL": stack.url, "TETHER_TOKEN": issue_token(TEST_SECRET, "alice")}
    out = _node_tests(CLIENT / "test" / "graph", env=env)
    assert "# pass 3" in out, out


def test_quickstart_runs_as_written(stack: Stack, fresh_database: str) -> None:
    """docs/examples/client_quickstart.mjs, unchanged, against the seeded demo: approve, done."""
    env = {"TETHER_URL": stack.url, "TETHER_TOKEN": issue_token(TEST_SECRET, "alice")}
    out = _run([_node(), str(QUICKSTART)], env=env, timeout=120)
    lines = out.splitlines()
    assert any(line.startswith("→ restart_instance") for line in lines), out
    assert any(
        line.startswith("? Restart instance:") and "payment-api-2" in line for line in lines
    ), out
    assert "✓ approved by alice" in lines, out
    assert lines[-1].startswith("done (") and lines[-1].endswith(" tokens out)"), out
    status = asyncio.run(_instance_status(fresh_database, "payment-api-2"))
    assert status == "healthy", status


async def _instance_status(dsn: str, instance: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.fetchval("SELECT status FROM inv_instance WHERE id = $1", instance))
    finally:
        await conn.close()
