"""`make bench` / `make bench-quick`: start a fresh database, one runtime and one gateway as real
processes, drive them from a load generator in a separate process (loadgen.py) over real HTTP/SSE
and gRPC on 127.0.0.1, and print ONE JSON document: the median of the repetitions.

Stores: the admin Postgres from TETHER_BENCH_DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/test; a fresh database is created in it and dropped after),
Redis from TETHER_BENCH_REDIS_URL (default redis://127.0.0.1:6379/0).

`--pgbouncer [POOL]`: the runtime processes reach that database through a PgBouncer in transaction
mode started by the harness (POOL server connections, default 10; LISTEN through its session-mode
alias), with TETHER_DB_POOLER=transaction; the load generator's own checks stay direct.

Each repetition starts its own runtime and gateway (so no repetition inherits another's memory or
connections), then runs every scenario in its own load-generator process. `--profile DIR` adds a
pass that records py-spy profiles of every runtime process and the gateway during `single_run`,
`fanout` and `fanout_split_runtime`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import resource
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil
from tether_common import redis_conn

from tether_bench import history, stack, stack_floor
from tether_bench.profile import render, summarize
from tether_bench.stats import median_of

BENCH_DIR = Path(__file__).resolve().parents[1]
# --loop-counts: its sitecustomize.py counts the timers and tasks of the processes under test
LOOP_COUNTS_DIR = Path(__file__).resolve().parent / "loop_counts"

# The LangGraph agent of the benchmark, loaded besides the native agents (the default agent stays
# the native one: the core configuration names none).
LANGGRAPH_ENV = {"TETHER_AGENTS": "tether_bench.lggraph:agent", "TETHER_DEFAULT_AGENT": "opspilot"}

# Sizes per mode. `quick` must finish well under 60 s on 2 cores and still produce every figure.
MODES: dict[str, dict[str, Any]] = {
    "quick": {
        "repetitions": 1,
        "heartbeat_s": 1.0,
        "deadline_s": 40,
        "stack_floor": {"clients": 16, "runs": 64, "idle": 200},
        "scenarios": {
            "first_event": {"samples": 5, "in_flight": 10, "background_deltas": 50},
            "resume": {"samples": 3},
            "single_run": {"deltas": 1000, "samples": 1},
            "grpc_stream": {"deltas": 1000, "samples": 1, "replay_events": 2000},
            "replay": {"events": 2000, "samples": 1},
            "fanout": {"runs": 20, "deltas": 50},
            "short_runs": {"clients": 16, "runs": 64, "count_rows": False},  # CI runs quick
            "idle_sse": {"connections": 200, "hold_s": 2.5, "open_concurrency": 50},
            "fanout_split_runtime": {
                "scenario": "fanout",
                "runtime_split": True,
                "runs": 20,
                "deltas": 50,
                "count_rows": False,
            },
            "provider_stream": {"provider": True, "deltas": 500, "samples": 1},
            "mcp_call": {"calls": 50},
            "langgraph": {
                "provider": True,
                "env": LANGGRAPH_ENV,
                "deltas": 500,
                "samples": 1,
                "first_event_samples": 3,
            },
        },
    },
    "full": {
        "repetitions": 3,
        "heartbeat_s": 2.0,
        "deadline_s": 300,
        # the short runs' I/O with no Tether code (stack_floor.py), the same size
        "stack_floor": {"clients": 32, "runs": 3000, "idle": 5000},
        "scenarios": {
            "first_event": {"samples": 40, "in_flight": 50, "background_deltas": 200},
            "resume": {"samples": 20},
            "single_run": {"deltas": 5000, "samples": 5},
            "grpc_stream": {"deltas": 5000, "samples": 5, "replay_events": 10000},
            "replay": {"events": 10000, "samples": 3},
            "fanout": {"runs": 200, "deltas": 200},
            # short runs (one read-only tool, then the answer), 32 clients, closed loop
            "short_runs": {"clients": 32, "runs": 3000},
            "idle_sse": {
                "connections": 5000,
                "hold_s": 10.0,
                "open_concurrency": 100,
                "open_timeout_s": 90,
            },
            # The same with the runtime's positioning check relaxed (a runtime setting, not code):
            # isolates the per-stream cost of the once-a-second check on idle streams.
            "idle_sse_quiet_check_30s": {
                "scenario": "idle_sse",
                "env": {"TETHER_STREAM_QUIET_CHECK_S": "30"},
                "connections": 5000,
                "hold_s": 10.0,
                "open_concurrency": 100,
            },
            # The same fan-out with the runtime run as two processes, TETHER_RUNTIME_ROLE=api
            # (gRPC) and =worker (agent loops): in one process every RPC waits for a turn of an
            # event loop crowded by 200 zero-delay agent loops.
            "fanout_split_runtime": {
                "scenario": "fanout",
                "runtime_split": True,
                "runs": 200,
                "deltas": 200,
                "count_rows": False,
            },
            # A real streaming provider (fake_provider.py, over the official `openai` SDK):
            # every token its own event, and with the default 40 ms coalescing window.
            # An MCP tool call against a native one, µs per call, stdio and Streamable HTTP
            # (mcp_overhead.py: in the load generator's process, the runtime's own MCP client).
            "mcp_call": {"calls": 300},
            "provider_stream": {"provider": True, "deltas": 5000, "samples": 5},
            "provider_stream_coalesced": {
                "scenario": "provider_stream",
                "provider": True,
                "env": {"TETHER_COALESCE_MS": "40"},
                "deltas": 5000,
                "samples": 5,
            },
            # A LangGraph graph as the agent (lggraph.py), against the native agent on the same
            # provider doing the same work, in the same processes.
            "langgraph": {
                "provider": True,
                "env": LANGGRAPH_ENV,
                "deltas": 5000,
                "samples": 5,
                "first_event_samples": 20,
            },
        },
        "history": {"runs": 100_000, "events": 10_000_000, "waiting": 10_000},
    },
}
# `history` (full only): these scenarios again after preloading a used database (history.py),
# each figure beside the same figure on the empty database.
HEADLINE = ("first_event", "fanout", "short_runs", "resume", "replay")
HISTORY_FIGURES = (
    "first_event.idle.p50",
    "first_event.loaded.p50",
    "first_event.loaded.p99",
    "fanout.fanout.events_per_s",
    "fanout.fanout.commit_to_arrival_p50_ms",
    "fanout.fanout.commit_to_arrival_p99_ms",
    "fanout.fanout.first_event_after_start_p50_ms",
    "fanout.db_rows_per_event.inserted",
    "short_runs.runs_per_s",
    "short_runs.run_ms.p50",
    "short_runs.run_ms.p99",
    "short_runs.first_event_ms.p50",
    "short_runs.first_event_ms.p99",
    "short_runs.runtime_cpu_ms_per_run",
    "short_runs.statements_per_run",
    "resume.p50",
    "resume.p99",
    "replay.ms",
)
PROFILED = {
    "single_run": {"samples": 40},
    "fanout": {},
    "fanout_split_runtime": {},
    "short_runs": {},
}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def process_env(dsn: str, redis_url: str, secret: str, heartbeat_s: float) -> dict[str, str]:
    env = {
        "DATABASE_URL": dsn,
        "REDIS_URL": redis_url,
        "TETHER_ENV": "dev",
        "TETHER_JWT_SECRET": secret,
        "TETHER_SCRIPTED_DELAY_S": "0",
        # One text_delta event per model delta: the event path itself is what is measured
        # (with the default 40 ms window a zero-delay model's step becomes ~1 event).
        "TETHER_COALESCE_MS": os.environ.get("TETHER_BENCH_COALESCE_MS", "0"),
        "TETHER_SSE_HEARTBEAT_S": str(heartbeat_s),
        "TETHER_LOG_LEVEL": os.environ.get("TETHER_BENCH_LOG_LEVEL", "INFO"),
        "TETHER_DRAIN_S": "3",  # stopping between repetitions need not wait out a long grace
        # The per-user start-rate limit guards a shared system; one bench user starts thousands.
        "TETHER_RATE_LIMIT_PER_MIN": "100000000",
        # Likewise the cap on one user's open streams: counted (in Redis, as in production,
        # where it is on), never reached. Off ("0"), a stream's slot cost nothing here.
        "TETHER_MAX_STREAMS_PER_USER": "100000000",
        # the runtime imports the benchmark's own agent (lggraph.py) when a scenario names it
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    # Optional knobs of the system under test, passed through when set.
    for name in (
        "TETHER_WORKER_CONCURRENCY",
        "TETHER_STREAM_QUIET_CHECK_S",
        "TETHER_SSE_BUFFER_BYTES",
        "TETHER_DB_POOL_SIZE",
        "TETHER_UVLOOP",
    ):
        value = os.environ.get(f"TETHER_BENCH_{name.removeprefix('TETHER_')}")
        if value:
            env[name] = value
    return env


async def loadgen(config: dict[str, Any], limit_s: float) -> dict[str, Any]:
    """Run one scenario in a load-generator process of its own; returns its JSON result."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether_bench.loadgen",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(json.dumps(config).encode()), limit_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"load generator for {config['scenario']} timed out") from None
    if proc.returncode != 0:
        raise RuntimeError(f"load generator for {config['scenario']} failed ({proc.returncode})")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


class Bench:
    def __init__(
        self,
        mode: str,
        admin_dsn: str,
        redis_url: str,
        reps: int | None,
        pgbouncer_pool: int = 0,
        runtime_processes: int = 1,
    ) -> None:
        self.mode = mode
        self.runtime_processes = runtime_processes
        self.spec = MODES[mode]
        self.reps = reps or int(self.spec["repetitions"])
        self.admin_dsn = admin_dsn
        self.redis_url = redis_url
        self.secret = secrets.token_urlsafe(48)
        self.dsn = ""
        self.pgbouncer_pool = pgbouncer_pool
        # What the system under test is given: the database directly, or through PgBouncer.
        self.system_env: dict[str, str] = {}
        self.procs: list[stack.Proc] = []
        self.provider: asyncio.subprocess.Process | None = None
        self.provider_url = ""
        # --loop-counts: where the processes under test write their loop's counts
        # (loop_counts/sitecustomize.py), None without the flag
        self.loop_counts: Path | None = None

    async def start_provider(self) -> dict[str, str]:
        """The fake streaming provider (once per bench), and the runtime settings pointing at
        it."""
        if self.provider is None:
            port = stack.free_port()
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
                ),
            }
            self.provider = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tether_bench.fake_provider", str(port), env=env
            )
            self.provider_url = f"http://127.0.0.1:{port}/v1"
            await _wait_port(port, 20)
        return {
            "TETHER_MODEL": "openai",
            "TETHER_OPENAI_BASE_URL": self.provider_url,
            "TETHER_OPENAI_API_KEY": "bench",
            "TETHER_OPENAI_MODEL": "bench-model",
        }

    async def stop_provider(self) -> None:
        if self.provider is not None and self.provider.returncode is None:
            self.provider.terminate()
            await self.provider.wait()
        self.provider = None

    async def start_processes(
        self, extra_env: dict[str, str] | None = None, *, split: bool = False
    ) -> tuple[stack.Proc, stack.Proc]:
        """The runtime (one process; with `split`, an API process plus a worker process) and
        the gateway."""
        env = process_env(self.dsn, self.redis_url, self.secret, float(self.spec["heartbeat_s"]))
        env.update(self.system_env)
        env.update(extra_env or {})
        if self.loop_counts is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(LOOP_COUNTS_DIR), env["PYTHONPATH"]])
            env["TETHER_UVLOOP"] = "off"  # (the module's docstring says why)
            env["TETHER_BENCH_LOOP_COUNTS_DIR"] = str(self.loop_counts)
        # quick: forked from a warm parent (its figures are checked for shape, not judged)
        fork = self.mode == "quick" and self.loop_counts is None  # the probe loads at start-up
        runtime = await stack.start_runtime(
            {**env, "TETHER_RUNTIME_ROLE": "api"} if split else env,
            processes=1 if split else self.runtime_processes,
            fork=fork,
        )
        self.procs.append(runtime)
        if split:
            worker_env = {**env, "TETHER_RUNTIME_ROLE": "worker"}
            self.procs.append(
                await stack.start_runtime(worker_env, name="runtime-worker", fork=fork)
            )
        gateway = await stack.start_gateway(env, runtime.addr, fork=fork)
        self.procs.append(gateway)
        return runtime, gateway

    async def stop_processes(self) -> None:
        t0 = time.monotonic()
        for p in reversed(self.procs):
            await p.stop()
            if p.proc.returncode not in (0, -signal.SIGTERM):
                log(f"{p.name} exited with {p.proc.returncode}; log: {p.log_path}")
        if self.procs:
            log(f"processes stopped in {time.monotonic() - t0:.1f}s")
        self.procs.clear()

    def config(
        self, scenario: str, runtime: stack.Proc, gateway: stack.Proc, params: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "scenario": scenario,
            "gateway": gateway.addr,
            "runtime": runtime.addr,
            "secret": self.secret,
            "user": "alice",
            "dsn": self.dsn,
            "redis": self.redis_url,
            "gateway_pid": gateway.pid,
            # every runtime process, the API one first (it is started first); with a split
            # runtime its worker too, so CPU figures add up
            "runtime_pids": [p.pid for p in self.procs if p.name.startswith("runtime")],
            "deadline_s": self.spec["deadline_s"],
            "params": {
                **{
                    k: v
                    for k, v in params.items()
                    if k not in ("scenario", "env", "runtime_split", "provider")
                },
                "provider_url": self.provider_url,
                "runtime_metrics": [p.metrics_url for p in self.procs if p.metrics_url],
                "heartbeat_s": self.spec["heartbeat_s"],
            },
        }

    async def repetition(self, rep: int, only: set[str] | None) -> dict[str, Any]:
        runtime, gateway = await self.start_processes()
        results: dict[str, Any] = {}
        try:
            for name, params in self.spec["scenarios"].items():
                if only and name not in only:
                    continue
                if params.get("env") or params.get("runtime_split") or params.get("provider"):
                    # a variant: fresh processes with these settings or this topology
                    await self.stop_processes()
                    env = dict(params.get("env") or {})
                    if params.get("provider"):
                        env.update(await self.start_provider())
                    runtime, gateway = await self.start_processes(
                        env, split=bool(params.get("runtime_split"))
                    )
                t0 = time.monotonic()
                cfg = self.config(params.get("scenario", name), runtime, gateway, params)
                cpu = await ScenarioCpu.start(self.dsn, self.procs, self.loop_counts)
                results[name] = await loadgen(cfg, float(self.spec["deadline_s"]) + 30)
                # beside the scenario's own figures, which stay as they were
                results.setdefault("_cpu_per_run", {})[name] = await cpu.stop()
                log(
                    f"rep {rep + 1}/{self.reps} {name}: {time.monotonic() - t0:.1f}s "
                    f"{json.dumps(results[name])[:300]}"
                )
                for p in self.procs:
                    if not p.alive():
                        raise RuntimeError(f"{p.name} died during {name}:\n{p.log_tail()}")
        finally:
            await self.stop_processes()
        floor = self.spec["stack_floor"]
        # The floor speaks to one plain Redis, and to Postgres directly (not through PgBouncer).
        if (not only or "stack_floor" in only) and not redis_conn.is_cluster(self.redis_url):
            t0 = time.monotonic()
            results["stack_floor"] = await asyncio.to_thread(
                stack_floor.repetition,
                floor["runs"],
                floor["clients"],
                self.dsn,
                self.redis_url,
                floor["idle"],
            )
            # and with the I/O Tether's guarantees need (no idle streams: the same gateway)
            results["stack_floor"]["with_guarantees"] = await asyncio.to_thread(
                stack_floor.repetition,
                floor["runs"],
                floor["clients"],
                self.dsn,
                self.redis_url,
                0,
                True,
            )
            if "short_runs" in results:  # side by side in this repetition
                _beside_short_runs(results["stack_floor"], results["short_runs"])
            log(
                f"rep {rep + 1}/{self.reps} stack_floor: {time.monotonic() - t0:.1f}s "
                f"{json.dumps(results['stack_floor'])}"
            )
        return results

    async def profile(
        self, out_dir: Path, native: bool, only: set[str] | None = None
    ) -> dict[str, Any]:
        """py-spy record on every runtime process and the gateway while the PROFILED scenarios
        run (those of them in `only`, when it names any)."""
        py_spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
        if not py_spy:
            raise SystemExit("--profile needs py-spy on PATH (uv run --with py-spy ...) or PY_SPY")
        _mkdir(out_dir)
        summaries: dict[str, Any] = {}
        split = False
        runtime, gateway = await self.start_processes()
        try:
            chosen = {n: e for n, e in PROFILED.items() if not only or n in only} or PROFILED
            for name, extra in chosen.items():
                params = {**self.spec["scenarios"][name], **extra}
                if bool(params.get("runtime_split")) != split:
                    split = not split
                    await self.stop_processes()
                    runtime, gateway = await self.start_processes(split=split)
                spies = []
                for p in self.procs:
                    path = out_dir / f"{name}-{p.name}.txt"
                    args = [
                        py_spy,
                        "record",
                        "--pid",
                        str(p.pid),
                        "--rate",
                        "250",
                        "--format",
                        "raw",
                        "--output",
                        str(path),
                    ]
                    # py-spy refuses --native with --nonblocking: a native profile pauses the
                    # process at each sample (its figures are then dearer than without).
                    args.append("--native" if native else "--nonblocking")
                    spy = await asyncio.create_subprocess_exec(
                        *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
                    )
                    spies.append((spy, path, p.name))
                await asyncio.sleep(1.0)  # py-spy attaches
                cpu0 = {p.name: p_cpu(p.pid) for p in self.procs}
                t0 = time.monotonic()
                cfg = self.config(params.get("scenario", name), runtime, gateway, params)
                result = await loadgen(cfg, 600)
                wall = time.monotonic() - t0
                cpu1 = {p.name: p_cpu(p.pid) for p in self.procs}
                for spy, path, pname in spies:
                    spy.send_signal(signal.SIGINT)
                    try:
                        await asyncio.wait_for(spy.wait(), 30)
                    except TimeoutError:
                        spy.kill()
                        await spy.wait()
                    s = summarize(path)
                    s["cpu_pct_of_one_core"] = round(100 * (cpu1[pname] - cpu0[pname]) / wall, 1)
                    summaries[f"{name}/{pname}"] = s
                    _write(out_dir / f"{name}-{pname}.summary.txt", render(s) + "\n")
                    log(f"profile {name}/{pname}: {path} ({s['samples']} samples)")
                summaries[f"{name}/result"] = result
        finally:
            await self.stop_processes()
        _write(out_dir / "summary.json", json.dumps(summaries, indent=2) + "\n")
        return summaries

    async def run(
        self, only: set[str] | None, profile_dir: Path | None, native: bool, out: Path | None
    ) -> dict[str, Any]:
        started = time.monotonic()
        self.dsn, pg_version = await stack.create_database(self.admin_dsn)
        log(f"database {self.dsn.rsplit('/', 1)[-1]} (PostgreSQL {pg_version})")
        redis_version = await _redis_version(self.redis_url)
        reps: list[dict[str, Any]] = []
        profile: dict[str, Any] | None = None
        pooler = contextlib.ExitStack()
        hist_spec = self.spec.get("history")
        want_history = hist_spec is not None and (only is None or "history" in only)
        if only and "history" in only:
            if hist_spec is None:
                raise SystemExit(f"history is not measured in {self.mode} mode (full only)")
            only = only | set(HEADLINE)  # the empty-database figures to compare with
        hist: dict[str, Any] = {}
        try:
            if self.pgbouncer_pool:
                self.system_env = self.through_pgbouncer(pooler)
            for rep in range(self.reps):
                reps.append(await self.repetition(rep, only))
            if want_history:
                log(f"history: preloading {hist_spec}")
                hist["preload"] = await history.preload(self.dsn, dict(hist_spec or {}), log)
                log(f"history: preloaded {hist['preload']}")
                hist["reps"] = [await self.repetition(r, set(HEADLINE)) for r in range(self.reps)]
            if profile_dir is not None:
                profile = await self.profile(profile_dir, native, only)
        finally:
            await self.stop_processes()
            await self.stop_provider()
            pooler.close()
            await stack.drop_database(self.admin_dsn, self.dsn)
        doc = self.document(reps, pg_version, redis_version, time.monotonic() - started)
        if hist:
            doc["history"] = history_figures(reps, hist["reps"], hist["preload"])
        if out is not None:
            full = {**doc, "per_repetition": reps}
            if hist:
                full["history_per_repetition"] = hist["reps"]
            if profile is not None:
                full["profile"] = profile
            _write(out, json.dumps(full, indent=2) + "\n")
        return doc

    def through_pgbouncer(self, stack_: contextlib.ExitStack) -> dict[str, str]:
        """Start PgBouncer (transaction mode, `pgbouncer_pool` server connections) in front of
        the bench database; the settings that send the runtime through it."""
        # The launcher the tests use (tests/tether_testkit/pgbouncer.py), not a second copy.
        stack.testkit_on_path()
        from tether_testkit.pgbouncer import database_of, pgbouncer

        db = database_of(self.dsn)
        bouncer = stack_.enter_context(
            pgbouncer(self.admin_dsn, pool_size=self.pgbouncer_pool, session_dbs=[db])
        )
        log(f"through PgBouncer on port {bouncer.port}, {self.pgbouncer_pool} server connections")
        # Its log outlives its folder, beside the processes' logs (runs before the folder goes).
        kept = stack.LOG_DIR / f"pgbouncer-{os.getpid()}-{time.time_ns()}.log"
        stack_.callback(lambda: _write(kept, bouncer.log()))
        stack_.callback(log, f"pgbouncer log: {kept}")
        return {
            "DATABASE_URL": bouncer.url(db),
            "TETHER_DB_POOLER": "transaction",
            "TETHER_DB_LISTEN_URL": bouncer.url(db, session=True),
        }

    def document(
        self, reps: list[dict[str, Any]], pg: str, redis_version: str, elapsed: float
    ) -> dict[str, Any]:
        def med(*path: str) -> Any:
            docs = []
            for r in reps:
                cur: Any = r
                for key in path:
                    cur = cur.get(key) if isinstance(cur, dict) else None
                if cur is not None:
                    docs.append(cur)
            return median_of(docs) if docs else None

        sizes = self.spec["scenarios"]
        errors: dict[str, str] = {}
        for i, r in enumerate(reps):  # strings a scenario reports ("_error") leave the figures
            for name, res in r.items():
                if isinstance(res, dict) and "_error" in res:
                    msg = res.pop("_error")
                    if msg:
                        errors[f"rep{i + 1}.{name}"] = msg
        doc: dict[str, Any] = {
            "benchmark": "tether",
            "mode": self.mode,
            "repetitions": self.reps,
            "cores": {
                "logical": os.cpu_count() or 0,
                "physical": psutil.cpu_count(logical=False) or 0,
                "usable": len(os.sched_getaffinity(0)),
            },
            "first_event_ms": med("first_event"),
            "resume_to_tool_started_ms": med("resume"),
            "single_run_events_per_s": med("single_run"),
            "fanout": med("fanout", "fanout"),
            **(
                {"fanout_split_runtime": med("fanout_split_runtime", "fanout")}
                if "fanout_split_runtime" in sizes
                else {}
            ),
            "short_runs": med("short_runs"),
            "stack_floor": med("stack_floor"),
            "replay_10k_ms": med("replay"),
            "idle_sse_connection_kib": med("idle_sse"),
            **(
                {"idle_sse_connection_kib_quiet_check_30s": med("idle_sse_quiet_check_30s")}
                if "idle_sse_quiet_check_30s" in sizes
                else {}
            ),
            "grpc_stream_events_per_s": med("grpc_stream"),
            "provider_stream": med("provider_stream"),
            **(
                {"provider_stream_coalesced": med("provider_stream_coalesced")}
                if "provider_stream_coalesced" in sizes
                else {}
            ),
            "langgraph": med("langgraph"),
            # CPU ms per run by process over each whole scenario (ScenarioCpu)
            "cpu_ms_per_run_by_scenario": {
                name: med("_cpu_per_run", name)
                for name in sizes
                if med("_cpu_per_run", name) is not None
            },
            # A read tool's call through an MCP server (stdio, Streamable HTTP) against a native
            # one, µs per call (mcp_overhead.py).
            "mcp_call_us": med("mcp_call"),
            "db_rows_per_event": med("fanout", "db_rows_per_event"),
            "redis_messages_per_event": med("fanout", "redis_messages_per_event"),
            "wal_bytes_per_event": med("fanout", "wal_bytes_per_event"),
            "elapsed_s": round(elapsed, 1),
            "errors": errors,
            "environment": {
                "python": platform.python_version(),
                "git": git_revision(),
                "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
                "postgres": pg,
                "pgbouncer_pool": self.pgbouncer_pool or None,  # None: direct to Postgres
                # N > 1: `tether runtime --processes N` (one port, SO_REUSEPORT); its CPU figures
                # are the supervisor's and every child's
                "runtime_processes": self.runtime_processes,
                "redis": redis_version,
                "scripted_delay_s": 0,
                "sse_heartbeat_s": self.spec["heartbeat_s"],
                "sizes": sizes,
            },
            "notes": {
                "statistic": "each figure is the median over repetitions of that repetition's "
                "value (p50/p99 within a repetition); latencies in ms, rates per second",
                "first_event_ms": "POST /runs with Accept: text/event-stream -> first SSE event "
                "(run_started) at the client; 'loaded' = while in_flight_runs other clients each "
                "keep one run of background_deltas deltas executing and streaming (closed loop)",
                "coalescing": "the system runs with TETHER_COALESCE_MS=0 (override with "
                "TETHER_BENCH_COALESCE_MS): every model delta is its own text_delta event, so "
                "events_delivered ~= deltas_produced and events/s measures the event path; with "
                "the default 40 ms window a zero-delay model's step merges into ~1 event",
                "replay_10k_ms": "a synthetic finished run: a real run whose event log is "
                "replaced in one transaction by run_started + N-2 text_delta + done, encoded by "
                "tether_runtime.domain.events and written by store.event_log.insert (no run size yields "
                "10k events at delay 0); then GET /events with Last-Event-ID: 0 until the last",
                "provider_stream": "a run whose model is a streaming OpenAI-compatible server "
                "(bench/tether_bench/fake_provider.py) driven through the official openai SDK: "
                "direct_sdk_ms = the same stream read straight from the server with the SDK; "
                "overhead_us_per_token = (through_tether_ms - direct_sdk_ms) / tokens: Tether's "
                "adapter, engine, event log, bus, gateway and SSE per token; _coalesced: with "
                "the default 40 ms window",
                "langgraph": "the benchmark's LangGraph graph (bench/tether_bench/lggraph.py: one "
                "node calling LangChain's ChatOpenAI, streaming, against the fake provider) and the "
                "native agent on the same provider, alternately, the same N tokens -> N "
                "text_delta events; first_event_ms = POST -> run_started, first_text_ms = POST -> "
                "first text_delta ('stream 5 deltas'); us_per_event = POST->done / events "
                "delivered; overhead_us_per_event = langgraph - native",
                "fanout": "commit->arrival = client wall clock at arrival minus the event's "
                "`time` (stamped by the runtime as it writes the event); same host clock",
                "db_rows_per_event": "pg_stat_user_tables n_tup_ins / n_tup_upd deltas over the "
                "fan-out scenario (all tables; includes the run, message and checkpoint rows "
                "each run writes) divided by events delivered",
                "wal_bytes_per_event": "pg_wal_lsn_diff over the fan-out scenario (the whole "
                "server's WAL, every database) divided by events delivered; short_runs has "
                "wal_bytes_per_run and db_rows_per_run (by table) the same way",
                "stack_floor": "the short runs' I/O (an HTTP start, one gRPC call, 15 events in 4 "
                "batched commits and pipelined publishes, a read, SSE to done) made by aiohttp, "
                "grpc.aio, asyncpg and redis-py with no Tether code, in two processes of their "
                "own after each repetition (stack_floor.py): CPU ms per run; "
                "short_runs_services_over_floor = short_runs' runtime + gateway over the floor's; "
                "floor_services_over_short_runs_postgres = the floor's two over short_runs' "
                "Postgres (each in its repetition, then the median; with short_runs only; "
                "#34's headline asks Tether's two for <= 1); with_guarantees: the same "
                "floor with the I/O Tether's guarantees need (batched admission and claim "
                "statements, a channel per run confirmed before the start, protobuf on the gRPC "
                "call); idle_sse_connection_kib: "
                "the floor gateway's RSS growth per idle SSE stream (headers, retry:, heartbeats) "
                "as idle_sse measures the gateway's",
                "redis_messages_per_event": "pubsub_received: a PSUBSCRIBE tether:run:* counter "
                "(only the scenario's runs); publish_calls/commands: INFO deltas (server-wide)",
                "idle_sse_connection_kib": "(gateway RSS at end of hold - RSS before opening) / "
                "connections; all_connected = every connection still open and got >= 1 "
                "heartbeat during the hold; opens refused (503) are counted in open_failures "
                "and the first refusal is in `errors`; -1 = not measured (e.g. the resume was "
                "refused, resume_failed=1)",
            },
        }
        return doc


def history_figures(
    empty: list[dict[str, Any]], loaded: list[dict[str, Any]], preload: dict[str, Any]
) -> dict[str, Any]:
    """Each headline figure's median over repetitions on the empty database and after the
    preload, and the change in percent."""

    def med(reps: list[dict[str, Any]], path: str) -> float:
        values = []
        for r in reps:
            cur: Any = r
            for key in path.split("."):
                cur = cur.get(key) if isinstance(cur, dict) else None
            if isinstance(cur, int | float):
                values.append(float(cur))
        return float(median_of(values)) if values else math.nan

    figures: dict[str, Any] = {}
    for path in HISTORY_FIGURES:
        before, after = med(empty, path), med(loaded, path)
        change = 100 * (after - before) / before if before else math.nan
        figures[path] = {"empty": before, "history": after, "change_pct": round(change, 1)}
    return {"preload": preload, "figures": figures}


async def _wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fake provider did not listen on {port}") from None
            await asyncio.sleep(0.1)


def git_revision() -> str:
    """The commit measured, with "+dirty" when the work tree differs (others edit it)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=BENCH_DIR.parent, capture_output=True, text=True, check=False
        ).stdout.strip()

    rev = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "services", "libs")
    return rev + ("+dirty" if dirty else "")


async def _redis_version(url: str) -> str:
    r = redis_conn.connect(url)
    try:
        info = await r.info("server")
    finally:
        await r.aclose()
    if "redis_version" not in info and info:  # a cluster asked on several nodes: one each
        info = next(iter(info.values()))
    version = str(info.get("redis_version", "?"))
    return f"{version} (cluster)" if redis_conn.is_cluster(url) else version


def _mkdir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class ScenarioCpu:
    """CPU per run by process over one whole scenario (its setup too), for every scenario: each
    runtime process, the gateway, every Postgres and redis-server process on the box; the runs
    are the `run` rows the scenario created. The figures the scenarios measure themselves (over
    their measured window only) stay where they are; these make any scenario's cost comparable
    between two commits."""

    STORES = {"postgres": "postgres", "redis-server": "redis"}

    def __init__(self, dsn: str, procs: list[stack.Proc], loop_counts: Path | None) -> None:
        self.dsn = dsn
        self.procs = {p.name: p.pid for p in procs}
        self.loop_counts = loop_counts
        self.before: dict[str, float] = {}
        self.counts_before: dict[str, int] = {}
        self.switches_before: dict[str, int] = {}
        self.runs = 0
        self.t0 = time.monotonic()

    @classmethod
    async def start(
        cls, dsn: str, procs: list[stack.Proc], loop_counts: Path | None = None
    ) -> ScenarioCpu:
        self = cls(dsn, procs, loop_counts)
        self.runs = await self._count_runs()
        self.counts_before = await self._loop_counts()
        self.switches_before = self._switches()
        self.before = self._cpu()
        self.t0 = time.monotonic()
        return self

    async def stop(self) -> dict[str, Any]:
        after = self._cpu()
        switches_after = self._switches()
        counts_after = await self._loop_counts()
        runs = await self._count_runs() - self.runs
        spent: dict[str, float] = {}
        for k, v in after.items():
            key = k.split("/", 1)[0]
            spent[key] = spent.get(key, 0.0) + v - self.before.get(k, 0.0)
        return {
            "runs": runs,
            "wall_s": round(time.monotonic() - self.t0, 2),
            **{
                f"{k}_ms": round(v * 1000 / runs, 3) if runs else None
                for k, v in sorted(spent.items())
            },
            **{
                f"{k}_per_run": round((v - self.counts_before.get(k, 0)) / runs, 2)
                for k, v in sorted(counts_after.items())
                if runs
            },
            **{
                f"{k}_switches_per_run": round((v - self.switches_before.get(k, 0)) / runs, 2)
                for k, v in sorted(switches_after.items())
                if runs and k in self.switches_before
            },
        }

    def _switches(self) -> dict[str, int]:
        """Context switches so far (voluntary and not, every thread) of each of our processes
        (a pod: all its processes): each time a thread blocks or is woken, e.g. the handoffs
        between grpc's completion-queue thread and the event loop, which a CPU figure only
        shows as a sum."""
        return {name: p_switches_tree(pid) for name, pid in self.procs.items()}

    async def _loop_counts(self) -> dict[str, int]:
        """With --loop-counts: timers armed and tasks created so far by each of our processes
        (a pod: all its processes), as `<name>_timers` / `<name>_tasks`; read after the files'
        next write (every 50 ms), so that the scenario's last turns are in."""
        if self.loop_counts is None:
            return {}
        await asyncio.sleep(0.2)
        out: dict[str, int] = {}
        for name, pid in self.procs.items():
            for one in p_tree(pid):
                with contextlib.suppress(OSError, ValueError):
                    counts = json.loads((self.loop_counts / f"{one.pid}.json").read_text())
                    for kind in ("timers", "tasks"):
                        key = f"{name}_{kind}"
                        out[key] = out.get(key, 0) + int(counts[kind])
        return out

    def _cpu(self) -> dict[str, float]:
        """CPU seconds so far: each of our processes by name, each store process by pid (a
        store process started meanwhile counts from zero; one that ended is left out); and, as
        `<name>_threads`, what our processes spent outside their main threads (grpc's poller and
        EventEngine threads, which py-spy's profiles do not show)."""
        out = {name: p_cpu_tree(pid) for name, pid in self.procs.items()}
        out.update({f"{name}_threads": p_thread_cpu_tree(pid) for name, pid in self.procs.items()})
        for p in psutil.process_iter(["name", "cpu_times"]):
            t = p.info["cpu_times"]
            key = self.STORES.get(p.info["name"] or "")
            if key is not None and t is not None:
                out[f"{key}/{p.pid}"] = float(t.user + t.system)
        return out

    async def _count_runs(self) -> int:
        conn = await asyncpg.connect(self.dsn)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM run"))
        finally:
            await conn.close()


def p_tree(pid: int) -> list[psutil.Process]:
    """A process and its live children (a pod's supervisor: its processes); none if it is gone."""
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def p_cpu_tree(pid: int) -> float:
    """CPU seconds of a process and its live children (a pod's supervisor: its processes)."""
    procs = p_tree(pid)
    if not procs:
        return math.nan
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def p_thread_cpu_tree(pid: int) -> float:
    """CPU seconds of the threads other than the main one, of a process and its live children."""
    total = 0.0
    for p in p_tree(pid):
        with contextlib.suppress(psutil.Error):
            total += sum(t.user_time + t.system_time for t in p.threads() if t.id != p.pid)
    return total


def p_switches_tree(pid: int) -> int:
    """Context switches of every thread of a process and its live children."""
    stack.testkit_on_path()
    from tether_testkit.thread_switches import context_switches

    return sum(context_switches(p.pid) for p in p_tree(pid))


def _beside_short_runs(floor: dict[str, Any], short: dict[str, Any]) -> None:
    """How one repetition's short runs compare with its floor (and with the floor's
    `with_guarantees` variant): their services over the floor's, the floor's over the short
    runs' Postgres CPU (#34's headline: runtime + gateway at most Postgres)."""
    tether = short["runtime_cpu_ms_per_run"] + short["gateway_cpu_ms_per_run"]
    for doc in (floor, floor.get("with_guarantees")):
        if isinstance(doc, dict):
            services = doc["runtime_cpu_ms_per_run"] + doc["gateway_cpu_ms_per_run"]
            doc["short_runs_services_over_floor"] = round(tether / services, 2)
            doc["floor_services_over_short_runs_postgres"] = round(
                services / short["postgres_cpu_ms_per_run"], 2
            )


def p_cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="tether_bench", description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_const", dest="mode", const="full")
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick")
    ap.add_argument("--reps", type=int, help="repetitions (default: 3 full, 1 quick)")
    ap.add_argument(
        "--only",
        help="comma-separated scenarios: "
        + ",".join([*MODES["full"]["scenarios"], "stack_floor", "history"]),
    )
    ap.add_argument("--out", type=Path, help="also write the document (with per-repetition data)")
    ap.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after the measured repetitions, record py-spy profiles into DIR",
    )
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument(
        "--loop-counts",
        action="store_true",
        help="count each process's timers and tasks per run (cpu_ms_per_run_by_scenario: "
        "<process>_timers_per_run / _tasks_per_run), on asyncio's loop instead of uvloop's: "
        "its CPU figures are then not uvloop's (loop_counts/sitecustomize.py)",
    )
    ap.add_argument(
        "--redis",
        choices=("plain", "cluster"),
        default="plain",
        help="cluster: fan out through a Redis Cluster (3 masters + 3 replicas) started here "
        "instead of TETHER_BENCH_REDIS_URL",
    )
    ap.add_argument(
        "--pgbouncer",
        type=int,
        nargs="?",
        const=10,
        default=0,
        metavar="POOL",
        help="the runtime through a PgBouncer in transaction mode with POOL server connections "
        "(default 10; needs the pgbouncer binary: apt-get install -y pgbouncer)",
    )
    ap.add_argument(
        "--runtime-processes",
        type=int,
        default=1,
        metavar="N",
        help="run the runtime as `tether runtime --processes N` (N processes behind one port)",
    )
    ap.set_defaults(mode="full")
    return ap.parse_args(argv)


async def amain(args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    raise_fd_limit()
    admin = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    only = set(args.only.split(",")) if args.only else None
    bench = Bench(args.mode, admin, redis_url, args.reps, args.pgbouncer, args.runtime_processes)
    if args.loop_counts:
        bench.loop_counts = Path(tempfile.mkdtemp(prefix="tether-loop-counts-"))
    return await bench.run(only, args.profile, args.native, args.out)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with contextlib.ExitStack() as stores:
        if args.redis == "cluster":
            redis_url = stores.enter_context(stack.redis_cluster())
        else:
            redis_url = os.environ.get("TETHER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
        doc = asyncio.run(amain(args, redis_url))
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
