"""The same LangGraph graph on LangGraph's own dev server (`langgraph dev`, in-memory) and on
Tether, side by side (`make bench-langgraph`, or
`PYTHONPATH=bench uv run --frozen python -m tether_bench.langgraph_compare`). Not run in CI: it
installs LangGraph's server into a throwaway virtualenv of its own and takes a minute or two.

The graph is lgcompare_graph.py, loaded unmodified by both: `talk` streams "t0 t1 ... t{N-1}"
from the benchmark's fake provider (fake_provider.py, paced so a client can leave mid-stream),
`act` asks `interrupt()` then calls the write tool, which appends one line to a file and pauses
inside the call. Printed as one JSON document:

- `rejoin`: per trial, start a run streaming, disconnect after k tokens (k spread over the
  stream), stay away `--away-ms` (0, 300, 1500: mid-stream, and after the run paused), rejoin with the last event id seen (LangGraph: `stream_resumable` and
  `GET /threads/{t}/runs/{r}/stream` with `Last-Event-ID`, and the same with LangGraph's default,
  `stream_resumable` left out; Tether: `GET /v1/runs/{r}/events`
  with `Last-Event-ID`), read to the end; the tokens received over both connections are checked
  against t0..t{N-1}: `trials_with_loss` (a token never received), `tokens_lost`,
  `tokens_duplicated`.
- `write_executions`: per trial, run to the interrupt, approve, and while the write tool is inside
  its call send a second approval: LangGraph: a second run on the thread with `command:
  {resume: true}` and `multitask_strategy` `interrupt` / `rollback`; Tether: a second
  `POST /resume` (another idempotency key: a double click) and a second message on the same
  conversation. Lines appended to the file = executions of the write.

- `sdk.<server>`: ONE script, LangGraph's official Python client (`langgraph-sdk`, sdk_trials.py),
  run unchanged against `langgraph dev`, Tether's gateway at `/langgraph` and Aegra (`aegra-api`,
  a Postgres-backed implementation of the same API): mid-stream rejoins and joins of a finished
  run from several cut points (`runs.join_stream` with `last_event_id`: events/tokens lost and
  duplicated), a doubled resume (two `command={"resume": True}` at once: executions of the
  write), runs per second and first event / first token p50 through the SDK.

The LangGraph server: the virtualenv `--langgraph-venv` (default `.tether/bench/langgraph-venv`)
is created on first use with `uv venv` and `uv pip install "langgraph-cli[inmem]"
langchain-openai libs/sdk libs/langgraph` (the graph imports the SDK's `write_tool`, which calls
the tool as it is outside Tether). Tether: a fresh database on TETHER_BENCH_DATABASE_URL, one
runtime and one gateway (stack.py), `TETHER_AGENTS=tether_bench.lgcompare:agent`. Aegra:
`--aegra-venv` (default `.tether/bench/aegra-venv`, created on first use with `aegra-api`,
greenlet, which its SQLAlchemy asyncio engine needs and it does not pull in, and the graph's
packages), `uvicorn aegra_api.main:app` on 127.0.0.1 with a langgraph.json of the same graph
(AEGRA_CONFIG) and a scratch database on TETHER_BENCH_DATABASE_URL's server (its migrations run
at its start; the database is dropped at the end). `--servers ''` leaves Aegra out."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from tether_bench import stack
from tether_bench.main import BENCH_DIR, _wait_port, process_env
from tether_bench.sdk_trials import SdkTrials, lines, log, loss, run_all, token_numbers, wait_lines
from tether_bench.sse import Event, Reader

ROOT = BENCH_DIR.parent
TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)


class CrlfReader(Reader):
    """The benchmark's SSE reader for a server that ends its lines with CRLF (LangGraph's, as
    the SSE spec allows); Tether's gateway sends LF."""

    def _feed(self, buf: bytes, chunk: bytes, wall: float, mono: float) -> tuple[bytes, bool]:
        joined = (buf + chunk).replace(b"\r\n", b"\n")  # a CR left at the end joins the next LF
        return super()._feed(b"", joined, wall, mono)


# -- the LangGraph dev server ------------------------------------------------------------------


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv") or str(ROOT / ".tools" / "uv" / "bin" / "uv")
    if not Path(uv).exists():
        raise SystemExit("uv is needed to create the servers' virtualenvs (make setup)")
    return uv


def _venv(venv: Path, exe: str, packages: list[str]) -> Path:
    """`venv/bin/exe`, the virtualenv created on first use with `packages` in it (made again
    from scratch, `--clear`, when an earlier attempt left it without `exe`: e.g. an install cut
    off). A virtualenv made with another list of packages (an older one: e.g. without
    `langchain`) gets the list installed into it once more (uv adds what is missing)."""
    path = venv / "bin" / exe
    wanted = venv / "tether-packages.json"
    listed = json.dumps(packages)
    python = str(venv / "bin" / "python")
    if path.exists():
        if wanted.exists() and wanted.read_text() == listed:
            return path
        log(f"updating {venv} with {' '.join(packages)}")
    else:
        log(f"creating {venv} with {' '.join(packages[:2])} (once)")
        subprocess.run(
            [_uv(), "venv", "--clear", str(venv), "--python", sys.executable], check=True
        )
    subprocess.run([_uv(), "pip", "install", "--python", python, *packages], check=True)
    wanted.write_text(listed)
    return path


def ensure_langgraph_venv(venv: Path) -> Path:
    """LangGraph's dev server, with what the graphs it is compared on import (`langchain` v1:
    create_agent and its middleware)."""
    graph_deps = [
        "langchain>=1.0",
        "langchain-openai",
        str(ROOT / "libs" / "sdk"),
        str(ROOT / "libs" / "langgraph"),
    ]
    return _venv(venv, "langgraph", ["langgraph-cli[inmem]", *graph_deps])


def ensure_aegra_venv(venv: Path) -> Path:
    """Aegra's server (`aegra-api` on PyPI, run with uvicorn); its SQLAlchemy asyncio engine
    needs greenlet, which aegra-api does not pull in."""
    graph_deps = ["langchain-openai", str(ROOT / "libs" / "sdk"), str(ROOT / "libs" / "langgraph")]
    return _venv(venv, "uvicorn", ["aegra-api", "greenlet", *graph_deps])


class LangGraphSide:
    def __init__(self, url: str, session: aiohttp.ClientSession, *, resumable: bool) -> None:
        self.url = url
        self.s = session
        self.resumable = resumable  # False: LangGraph's default (`stream_resumable` left out)
        self.name = "langgraph_dev" if resumable else "langgraph_dev_default_not_resumable"

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.s.post(self.url + path, json=body) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise RuntimeError(f"POST {path}: HTTP {resp.status}: {text[:300]}")
            return dict(json.loads(text))

    async def thread(self) -> str:
        return str((await self._post("/threads", {}))["thread_id"])

    async def stream_then_rejoin(self, text: str, cut: int, away_s: float) -> list[int]:
        """Stream a run, leave after `cut` tokens, come back `away_s` later from the last event
        id, read to the end; the token numbers received over both connections, in order."""
        tid = await self.thread()
        body = {
            "assistant_id": "compare",
            "input": {"messages": [{"role": "user", "content": text}]},
            "stream_mode": ["messages-tuple"],
            "on_disconnect": "continue",
            **({"stream_resumable": True} if self.resumable else {}),
        }
        tokens: list[int] = []
        resp = await self.s.post(f"{self.url}/threads/{tid}/runs/stream", json=body)
        run_path = resp.headers["Content-Location"]  # /threads/{t}/runs/{r}
        first = CrlfReader(resp, on_event=_collect(tokens, _lg_tokens, cut), keep=True)
        try:
            await first.read()
        finally:
            resp.close()  # the client goes away mid-stream
        last_id = next((e.id for e in reversed(first.events) if e.id), "")
        await asyncio.sleep(away_s)
        headers = {"Last-Event-ID": last_id} if last_id else {}
        async with self.s.get(
            f"{self.url}{run_path}/stream",
            params={"stream_mode": "messages-tuple"},
            headers=headers,
        ) as again:
            await CrlfReader(again, on_event=_collect(tokens, _lg_tokens, None), keep=False).read()
        return tokens

    async def write_trial(self, file: Path, strategy: str) -> dict[str, Any]:
        tid = await self.thread()
        before = lines(file)
        ask = {"messages": [{"role": "user", "content": "stream 5 deltas"}]}
        await self._post(f"/threads/{tid}/runs/wait", {"assistant_id": "compare", "input": ask})
        approve = {"assistant_id": "compare", "command": {"resume": True}}
        first = await self._post(f"/threads/{tid}/runs", approve)
        await wait_lines(file, before + 1)  # the first approval's write is in progress
        second = await self._post(
            f"/threads/{tid}/runs", {**approve, "multitask_strategy": strategy}
        )
        async with self.s.get(f"{self.url}/threads/{tid}/runs/{second['run_id']}/join") as r:
            await r.read()
        await asyncio.sleep(1.5)  # anything still running finishes its write
        async with self.s.get(f"{self.url}/threads/{tid}/runs/{first['run_id']}") as r:
            status = str((await r.json()).get("status")) if r.status == 200 else f"HTTP {r.status}"
        return {"executions": lines(file) - before, "first_run": status}


def _lg_tokens(e: Event) -> list[int]:
    if not e.type.startswith("messages"):
        return []
    data: Any = json.loads(e.data)  # [message chunk, metadata]
    chunk: Any = data[0] if isinstance(data, list) and data else {}
    if not isinstance(chunk, dict) or chunk.get("type") not in ("AIMessageChunk", "ai"):
        return []
    return token_numbers(str(chunk.get("content", "")))


def _tether_tokens(e: Event) -> list[int]:
    if e.type != "text_delta":
        return []
    return token_numbers(str(e.json().get("delta", "")))


def _collect(
    into: list[int], parse: Callable[[Event], list[int]], cut: int | None
) -> Callable[[Event], bool]:
    got = [0]

    def on_event(e: Event) -> bool:
        found = parse(e)
        into.extend(found)
        got[0] += len(found)
        if e.type == "interrupt":
            return True  # Tether: the run waits for a person; its stream stays open
        return cut is not None and got[0] >= cut

    return on_event


# -- Tether --------------------------------------------------------------------------------------


class TetherSide:
    name = "tether"

    def __init__(self, url: str, token: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.s = session
        self.auth = {"Authorization": f"Bearer {token}"}

    async def _post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        async with self.s.post(self.url + path, json=body, headers=self.auth) as resp:
            text = await resp.text()
            return resp.status, (json.loads(text) if text else {})

    async def conversation(self) -> str:
        status, body = await self._post("/v1/conversations", {"title": "lgcompare"})
        if status != 201:
            raise RuntimeError(f"create conversation: HTTP {status}: {body}")
        return str(body["conversation"]["id"])

    async def _start_stream(self, conv: str, text: str) -> aiohttp.ClientResponse:
        resp = await self.s.post(
            f"{self.url}/v1/conversations/{conv}/runs",
            json={"text": text, "agent": "lgcompare"},
            headers={**self.auth, "Accept": "text/event-stream"},
        )
        if resp.status != 201:
            raise RuntimeError(f"start run: HTTP {resp.status}: {(await resp.text())[:300]}")
        return resp

    async def _events(self, run_id: str, last_id: str) -> aiohttp.ClientResponse:
        headers = {**self.auth, "Accept": "text/event-stream"}
        if last_id:
            headers["Last-Event-ID"] = last_id
        return await self.s.get(f"{self.url}/v1/runs/{run_id}/events", headers=headers)

    async def stream_then_rejoin(self, text: str, cut: int, away_s: float) -> list[int]:
        conv = await self.conversation()
        tokens: list[int] = []
        resp = await self._start_stream(conv, text)
        first = Reader(resp, on_event=_collect(tokens, _tether_tokens, cut), keep=True)
        try:
            await first.read()
        finally:
            resp.close()
        run_id = first.events[0].json()["runId"]
        last_id = next((e.id for e in reversed(first.events) if e.id), "")
        await asyncio.sleep(away_s)
        again = await self._events(run_id, last_id)
        try:
            await Reader(again, on_event=_collect(tokens, _tether_tokens, None), keep=False).read()
        finally:
            again.close()
        return tokens

    async def write_trial(self, file: Path) -> dict[str, Any]:
        conv = await self.conversation()
        before = lines(file)
        resp = await self._start_stream(conv, "stream 5 deltas")
        reader = Reader(resp, on_event=lambda e: e.type == "interrupt", keep=True)
        try:
            await reader.read()
        finally:
            resp.close()
        intr = reader.events[-1]
        if intr.type != "interrupt":
            raise RuntimeError(f"the run ended without an interrupt: {intr.type} {intr.data}")
        run_id, interrupt_id = intr.json()["runId"], intr.json()["interruptId"]

        def approve() -> dict[str, Any]:
            return {
                "interruptId": interrupt_id,
                "decision": "approve",
                "idempotencyKey": secrets.token_hex(8),
            }

        first, _ = await self._post(f"/v1/runs/{run_id}/resume", approve())
        await wait_lines(file, before + 1)  # the approved write is in progress
        again, _ = await self._post(f"/v1/runs/{run_id}/resume", approve())  # a double click
        message, _ = await self._post(
            f"/v1/conversations/{conv}/runs", {"text": "stream 5 deltas", "agent": "lgcompare"}
        )
        rest = await self._events(run_id, intr.id)
        try:
            await Reader(rest, keep=False).read()
        finally:
            rest.close()
        await asyncio.sleep(1.5)
        return {
            "executions": lines(file) - before,
            "first_resume_http": first,
            "second_resume_http": again,
            "second_message_http": message,
        }


# -- the comparison ----------------------------------------------------------------------------


async def rejoin_trials(
    side: Any, trials: int, tokens: int, pace_ms: int, away_s: float
) -> dict[str, Any]:
    text = f"stream {tokens} deltas every {pace_ms} ms"
    with_loss = with_dups = lost = duplicated = 0
    for i in range(trials):
        cut = max(1, tokens * (i + 1) // (trials + 1))  # leave at a different point each time
        got = await side.stream_then_rejoin(text, cut, away_s)
        missing, dups = loss(got, tokens)
        with_loss += missing > 0
        with_dups += dups > 0
        lost += missing
        duplicated += dups
        log(
            f"{side.name} rejoin {i + 1}/{trials} (away {away_s}s): left after {cut}, "
            f"lost {missing}, dup {dups}"
        )
    return {
        "trials": trials,
        "away_ms": round(away_s * 1000),
        "tokens_per_run": tokens,
        "trials_with_loss": with_loss,
        "trials_with_duplicates": with_dups,
        "tokens_lost": lost,
        "tokens_duplicated": duplicated,
    }


async def compare(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="lgcompare-"))
    lg_file, tether_file = work / "langgraph.txt", work / "tether.txt"
    exe = ensure_langgraph_venv(args.langgraph_venv)
    procs: list[asyncio.subprocess.Process] = []
    tether_procs: list[stack.Proc] = []
    admin = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    redis_url = os.environ.get("TETHER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    dsn = aegra_dsn = ""
    common = {
        "TETHER_OPENAI_API_KEY": "bench",
        "LGCOMPARE_WRITE_PAUSE_S": str(args.write_pause_s),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    try:
        port = stack.free_port()
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tether_bench.fake_provider",
                str(port),
                env={**os.environ, **common},
            )
        )
        await _wait_port(port, 20)
        common["TETHER_OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"

        lg_port = stack.free_port()
        config = work / "langgraph.json"
        graph = BENCH_DIR / "tether_bench" / "lgcompare_graph.py"
        config.write_text(
            json.dumps({"dependencies": ["."], "graphs": {"compare": f"{graph}:graph"}})
        )
        lg_log = (work / "langgraph-dev.log").open("wb")  # noqa: ASYNC230, SIM115 - closed below
        procs.append(
            await asyncio.create_subprocess_exec(
                str(exe),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(lg_port),
                "--config",
                str(config),
                cwd=work,
                env={
                    **os.environ,
                    **common,
                    "LGCOMPARE_FILE": str(lg_file),
                    "LANGSMITH_TRACING": "false",
                    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
                },
                stdout=lg_log,
                stderr=lg_log,
            )
        )
        lg_log.close()

        aegra_port = 0
        if "aegra" in args.servers:
            aegra_dsn = await _scratch_database(admin)
            aegra_port = stack.free_port()
            procs.append(await _start_aegra(args, work, aegra_dsn, aegra_port, common))

        dsn, _ = await stack.create_database(admin)
        import asyncpg
        from tether_common.auth import issue_token
        from tether_runtime.store import grants

        conn = await asyncpg.connect(dsn)
        try:
            await grants.add(conn, "alice", "file.append", "*")
        finally:
            await conn.close()
        secret = secrets.token_urlsafe(48)
        env = {
            **process_env(dsn, redis_url, secret, 2.0),
            **common,
            "TETHER_AGENTS": "tether_bench.lgcompare:agent",
            "LGCOMPARE_FILE": str(tether_file),
        }
        runtime = await stack.start_runtime(env, 120)  # LangGraph imports cold: slow on a busy box
        tether_procs.append(runtime)
        tether_procs.append(await stack.start_gateway(env, runtime.addr, 120))
        await _wait_port(lg_port, 90)
        log(f"langgraph dev on {lg_port} (log {work / 'langgraph-dev.log'}); tether up")
        if aegra_port:
            await _wait_port(aegra_port, 90)
            log(f"aegra on {aegra_port} (log {work / 'aegra.log'})")

        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            lg = LangGraphSide(f"http://127.0.0.1:{lg_port}", session, resumable=True)
            lg_default = LangGraphSide(f"http://127.0.0.1:{lg_port}", session, resumable=False)
            tether = TetherSide(
                tether_procs[1].addr, issue_token(secret, "alice", ttl_s=3600), session
            )
            doc: dict[str, Any] = {"benchmark": "langgraph_compare", "rejoin": {}, "writes": {}}
            token = issue_token(secret, "alice", ttl_s=3600)
            sdk_sides = {
                "langgraph_dev": SdkTrials(
                    "langgraph_dev", f"http://127.0.0.1:{lg_port}", "compare", lg_file
                ),
                "tether": SdkTrials(
                    "tether",
                    f"{tether_procs[1].addr}/langgraph",
                    "lgcompare",
                    tether_file,
                    {"Authorization": f"Bearer {token}"},
                ),
            }
            if aegra_port:
                sdk_sides["aegra"] = SdkTrials(
                    "aegra", f"http://127.0.0.1:{aegra_port}", "compare", work / "aegra.txt"
                )
            doc["sdk"] = {
                "client": f"langgraph-sdk {_version(Path(sys.executable), 'langgraph-sdk')}"
            }
            if "sdk" not in args.parts:
                sdk_sides.clear()
            for name, sdk_side in sdk_sides.items():
                try:
                    doc["sdk"][name] = await run_all(
                        sdk_side,
                        cuts=args.sdk_cuts,
                        tokens=args.sdk_tokens,
                        pace_ms=args.pace_ms,
                        doubled=args.sdk_doubled,
                        runs=args.sdk_runs,
                        concurrency=args.sdk_concurrency,
                    )
                finally:
                    await sdk_side.close()
            if "raw" not in args.parts:
                args.away_ms, args.write_trials = [], 0
            for away_ms in args.away_ms:
                for side in (lg, lg_default, tether):
                    doc["rejoin"][f"{side.name}_away_{away_ms}ms"] = await rejoin_trials(
                        side, args.trials, args.tokens, args.pace_ms, away_ms / 1000
                    )
            for strategy in ("interrupt", "rollback") if args.write_trials else ():
                runs = [await lg.write_trial(lg_file, strategy) for _ in range(args.write_trials)]
                doc["writes"][f"langgraph_dev_{strategy}"] = {
                    **_writes(runs),
                    "first_run_ends": sorted({str(r["first_run"]) for r in runs}),
                }
            runs = [await tether.write_trial(tether_file) for _ in range(args.write_trials)]
            doc["writes"]["tether_resume_twice_and_second_message"] = runs and {
                **_writes(runs),
                "http_statuses": sorted(
                    {
                        f"{k}={r[k]}"
                        for r in runs
                        for k in ("first_resume_http", "second_resume_http", "second_message_http")
                    }
                ),
            }
        doc["settings"] = {
            "trials": args.trials,
            "tokens": args.tokens,
            "pace_ms": args.pace_ms,
            "away_ms": args.away_ms,
            "write_trials": args.write_trials,
            "write_pause_s": args.write_pause_s,
            "langgraph_api": _version(exe, "langgraph-api"),
            "langgraph_runtime_inmem": _version(exe, "langgraph-runtime-inmem"),
            "langgraph": _version(exe, "langgraph"),
            "aegra_api": _version(args.aegra_venv / "bin" / "uvicorn", "aegra-api")
            if "aegra" in args.servers
            else "not run",
            "sdk_cuts": args.sdk_cuts,
            "sdk_tokens": args.sdk_tokens,
            "sdk_doubled": args.sdk_doubled,
            "sdk_runs": args.sdk_runs,
            "sdk_concurrency": args.sdk_concurrency,
        }
        return doc
    finally:
        for p in reversed(tether_procs):
            await p.stop()
        for proc in reversed(procs):
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        for db in (dsn, aegra_dsn):
            if db:
                await stack.drop_database(admin, db)


async def _scratch_database(admin: str) -> str:
    """An empty database for Aegra (its own migrations create its tables on start)."""
    import asyncpg

    name = "aegra_bench_" + secrets.token_hex(5)
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))


async def _start_aegra(
    args: argparse.Namespace, work: Path, dsn: str, port: int, common: dict[str, str]
) -> asyncio.subprocess.Process:
    """Aegra (`aegra-api`, Postgres-backed) on the same graph file, with its own langgraph.json
    (AEGRA_CONFIG) and database; no auth (its default `noop`)."""
    uvicorn = ensure_aegra_venv(args.aegra_venv)
    graph = BENCH_DIR / "tether_bench" / "lgcompare_graph.py"
    config = work / "aegra" / "langgraph.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"dependencies": ["."], "graphs": {"compare": f"{graph}:graph"}}))
    out = (work / "aegra.log").open("wb")  # noqa: SIM115 - handed to the child, closed below
    try:
        return await asyncio.create_subprocess_exec(
            str(uvicorn),
            "aegra_api.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            cwd=config.parent,
            env={
                **os.environ,
                **common,
                "AEGRA_CONFIG": str(config),
                "DATABASE_URL": dsn,
                "LGCOMPARE_FILE": str(work / "aegra.txt"),
                "LANGSMITH_TRACING": "false",
                "LOG_LEVEL": "WARNING",
            },
            stdout=out,
            stderr=out,
        )
    finally:
        out.close()


def _writes(runs: list[dict[str, Any]]) -> dict[str, Any]:
    execs = [int(r["executions"]) for r in runs]
    return {
        "trials": len(runs),
        "executions_per_trial": execs,
        "trials_executed_twice_or_more": sum(1 for x in execs if x > 1),
    }


def _version(exe: Path, package: str) -> str:
    out = subprocess.run(
        [
            str(exe.parent / "python"),
            "-c",
            f"import importlib.metadata as m; print(m.version({package!r}))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="tether_bench.langgraph_compare", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--trials", type=int, default=20, help="rejoin trials per system")
    ap.add_argument("--tokens", type=int, default=200, help="tokens streamed per rejoin run")
    ap.add_argument("--pace-ms", type=int, default=5, help="the fake provider's pause per token")
    ap.add_argument(
        "--away-ms",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[0, 300, 1500],
        help="comma-separated: how long the client stays away before rejoining (one set of "
        "trials each; 1500 ms outlasts the default stream)",
    )
    ap.add_argument("--write-trials", type=int, default=5, help="write trials per strategy")
    ap.add_argument("--write-pause-s", type=float, default=1.0, help="pause inside the write")
    ap.add_argument("--sdk-cuts", type=int, default=5, help="SDK rejoin cut points per server")
    ap.add_argument("--sdk-tokens", type=int, default=60, help="tokens per SDK rejoin run")
    ap.add_argument("--sdk-doubled", type=int, default=3, help="SDK doubled-resume trials")
    ap.add_argument("--sdk-runs", type=int, default=20, help="SDK runs for the throughput")
    ap.add_argument("--sdk-concurrency", type=int, default=4, help="SDK runs at a time")
    ap.add_argument(
        "--servers",
        type=lambda v: v.split(","),
        default=["aegra"],
        help="comma-separated extra servers for the SDK script: aegra, or empty",
    )
    ap.add_argument(
        "--parts",
        type=lambda v: v.split(","),
        default=["sdk", "raw"],
        help="sdk (the langgraph-sdk script on every server), raw (the HTTP rejoin and write "
        "trials against langgraph dev and Tether's own API)",
    )
    ap.add_argument(
        "--aegra-venv",
        type=Path,
        default=ROOT / ".tether" / "bench" / "aegra-venv",
        help="the virtualenv of Aegra's server (created on first use)",
    )
    ap.add_argument(
        "--langgraph-venv",
        type=Path,
        default=ROOT / ".tether" / "bench" / "langgraph-venv",
        help="the virtualenv of LangGraph's server (created on first use)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    doc = asyncio.run(compare(parse_args(argv)))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
