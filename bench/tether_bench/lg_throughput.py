"""Runs per second of Tether's LangGraph API alone, through LangGraph's official client
(`langgraph-sdk`), with the CPU each process spent per run:
`PYTHONPATH=bench uv run --frozen python -m tether_bench.lg_throughput [--concurrency 1,4,16]`.

The stack as langgraph_compare.py starts it (the benchmark's fake provider, a fresh database,
one runtime and one gateway started cold, `TETHER_AGENTS=tether_bench.lgcompare:agent`), then
per concurrency the SDK script's throughput trial (sdk_trials.py: `runs.stream` on a fresh thread
to the interrupt) and the CPU seconds of the runtime, the gateway, the fake provider and this
client (`/proc/<pid>/stat` utime + stime) over the trial, per run, and every Postgres and
Redis process's on the box (`loadgen.StoresCpu`), and the statements the
runtime's pool sent per run (tether_db_statements_total), in all and by kind, and the gRPC
requests it served per run, by method (tether_grpc_request_seconds). `--profile DIR` records the
runtime and the gateway with py-spy (it must be on PATH or in the virtualenv) during the last
concurrency's trial, as collapsed stacks (`python -m tether_bench.profile DIR/*.txt`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from tether_bench import stack
from tether_bench.loadgen import _GRPC_CALLS, _STATEMENTS, StoresCpu, _counters
from tether_bench.main import BENCH_DIR, _wait_port, process_env
from tether_bench.sdk_trials import SdkTrials, log, run_all

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _py_spy_exe() -> str:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return exe if Path(exe).exists() else ""


async def _py_spy(pid: int, out: Path) -> asyncio.subprocess.Process | None:
    exe = _py_spy_exe()
    if not exe:
        log("py-spy not found: no profile")
        return None
    return await asyncio.create_subprocess_exec(
        exe,
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        "200",
        "--output",
        str(out),
        "--nonblocking",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="lgthroughput-"))
    admin = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    redis_url = os.environ.get("TETHER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    common = {
        "TETHER_OPENAI_API_KEY": "bench",
        "LGCOMPARE_WRITE_PAUSE_S": str(args.write_pause_s),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    procs: list[stack.Proc] = []
    provider: asyncio.subprocess.Process | None = None
    dsn = ""
    try:
        port = stack.free_port()
        provider = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tether_bench.fake_provider",
            str(port),
            env={**os.environ, **common},
        )
        await _wait_port(port, 20)
        common["TETHER_OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
        dsn, _ = await stack.create_database(admin)
        from tether_common.auth import issue_token

        secret = secrets.token_urlsafe(48)
        env = {
            **process_env(dsn, redis_url, secret, 2.0),
            **common,
            "TETHER_AGENTS": "tether_bench.lgcompare:agent",
            "LGCOMPARE_FILE": str(work / "tether.txt"),
        }
        runtime = await stack.start_runtime(env, 120)
        procs.append(runtime)
        gateway = await stack.start_gateway(env, runtime.addr, 120)
        procs.append(gateway)
        token = issue_token(secret, "alice", ttl_s=3600)
        side = SdkTrials(
            "tether",
            f"{gateway.addr}/langgraph",
            "lgcompare",
            work / "tether.txt",
            {"Authorization": f"Bearer {token}"},
        )
        pids = {
            "runtime": runtime.pid,
            "gateway": gateway.pid,
            "provider": provider.pid,
            "client": os.getpid(),
        }
        doc: dict[str, Any] = {"benchmark": "lg_throughput", "text": args.text, "trials": []}
        try:
            if args.sdk_script:
                # as langgraph_compare.py runs it, before its own throughput trial
                doc["sdk_script"] = await run_all(
                    side, cuts=5, tokens=60, pace_ms=5, doubled=3, runs=20, concurrency=4
                )
            await side.throughput(args.warmup, min(4, args.warmup), args.text)
            for i, c in enumerate(args.concurrency):
                spies: list[asyncio.subprocess.Process] = []
                if args.profile and i == len(args.concurrency) - 1:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    for name in ("runtime", "gateway"):
                        spy = await _py_spy(pids[name], args.profile / f"{name}.txt")
                        if spy is not None:
                            spies.append(spy)
                    await asyncio.sleep(0.5)
                before = {n: cpu_s(p) for n, p in pids.items()}
                sent = await _counters([runtime.metrics_url], _STATEMENTS)
                asked = await _counters([runtime.metrics_url], _GRPC_CALLS)
                stores = StoresCpu()
                got = await side.throughput(args.runs, c, args.text)
                stores.stop()
                after = {n: cpu_s(p) for n, p in pids.items()}
                sent_after = await _counters([runtime.metrics_url], _STATEMENTS)
                asked_after = await _counters([runtime.metrics_url], _GRPC_CALLS)
                for spy in spies:
                    spy.send_signal(2)  # SIGINT: py-spy writes its file
                    await spy.wait()
                got["cpu_ms_per_run"] = {
                    n: round((after[n] - before[n]) * 1000 / args.runs, 1) for n in pids
                }
                # Every Postgres and Redis process on the box (StoresCpu; the client is above).
                for name, ms in stores.per_run(args.runs).items():
                    if name != "loadgen_cpu_ms_per_run":
                        got["cpu_ms_per_run"][name.removesuffix("_cpu_ms_per_run")] = round(ms, 1)
                got["db_statements_per_run"] = round(
                    (sum(sent_after.values()) - sum(sent.values())) / args.runs, 1
                )
                got["db_statements_per_run_by_kind"] = {
                    k: round((n - sent.get(k, 0.0)) / args.runs, 2)
                    for k, n in sorted(sent_after.items())
                    if n - sent.get(k, 0.0) >= args.runs / 10
                }
                got["rpcs_per_run"] = {
                    m: round((n - asked.get(m, 0.0)) / args.runs, 2)
                    for m, n in sorted(asked_after.items())
                    if n - asked.get(m, 0.0) >= args.runs / 10
                }
                doc["trials"].append(got)
                log(f"c={c}: {got}")
        finally:
            await side.close()
        return doc
    finally:
        for p in reversed(procs):
            await p.stop()
        if provider is not None and provider.returncode is None:
            provider.terminate()
            await provider.wait()
        if dsn:
            await stack.drop_database(admin, dsn)
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="tether_bench.lg_throughput", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--concurrency",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[1, 4, 16],
        help="comma-separated: runs at a time, one trial each",
    )
    ap.add_argument("--runs", type=int, default=40, help="runs per trial")
    ap.add_argument("--warmup", type=int, default=8, help="runs before the first trial")
    ap.add_argument("--text", default="stream 5 deltas", help="the user message of each run")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy output folder")
    ap.add_argument(
        "--sdk-script",
        action="store_true",
        help="first the whole SDK script of langgraph_compare.py (rejoins, joins, doubled "
        "resumes, its own throughput trial) with its default settings",
    )
    ap.add_argument("--write-pause-s", type=float, default=0.0, help="pause inside the write")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    print(json.dumps(asyncio.run(measure(parse_args(argv))), indent=2))


if __name__ == "__main__":
    main()
