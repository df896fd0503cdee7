"""`make bench-quick` end to end: the harness starts its own runtime and gateway on a fresh
database, drives them from a separate load-generator process, and prints one JSON document in
which every figure is present and a number. (CI checks completion and shape, not the values.)"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Every figure of the document and the numeric fields each must carry.
REQUIRED: dict[str, list[str]] = {
    "cores": ["logical", "usable"],
    "first_event_ms": ["idle.p50", "idle.p99", "loaded.p50", "loaded.p99", "in_flight_runs"],
    "resume_to_tool_started_ms": ["p50", "p99"],
    "single_run_events_per_s": [
        "events_per_s",
        "deltas_per_s",
        "deltas_produced",
        "events_delivered",
        "duration_ms",
    ],
    "fanout": [
        "runs",
        "deltas_per_run",
        "events",
        "events_per_s",
        "commit_to_arrival_p50_ms",
        "commit_to_arrival_p99_ms",
    ],
    "fanout_split_runtime": [
        "runs",
        "events",
        "events_per_s",
        "commit_to_arrival_p50_ms",
        "commit_to_arrival_p99_ms",
    ],
    "replay_10k_ms": ["ms", "events", "events_per_s"],
    "idle_sse_connection_kib": [
        "kib_per_connection",
        "connections",
        "connected_after_hold",
        "all_connected",
        "heartbeats_min",
    ],
    "grpc_stream_events_per_s": ["events_per_s", "deltas_per_s", "replay_events_per_s"],
    "langgraph": [
        "langgraph.first_event_ms.p50",
        "langgraph.first_text_ms.p99",
        "langgraph.events_per_s",
        "langgraph.us_per_event",
        "native.first_event_ms.p50",
        "native.us_per_event",
        "overhead_us_per_event",
    ],
    "stack_floor": [
        "runtime_cpu_ms_per_run",
        "gateway_cpu_ms_per_run",
        "postgres_cpu_ms_per_run",
        "statements_per_run",
        "runs_per_s",
        "short_runs_services_over_floor",
        "floor_services_over_short_runs_postgres",
        "with_guarantees.runtime_cpu_ms_per_run",
        "with_guarantees.statements_per_run",
        "with_guarantees.floor_services_over_short_runs_postgres",
    ],
    "mcp_call_us": ["native_us", "stdio_us", "http_us", "stdio_overhead_us", "http_overhead_us"],
    "db_rows_per_event": ["inserted", "updated", "run_event_inserted"],
    "redis_messages_per_event": ["pubsub_received", "publish_calls"],
}


def _leaves(doc: object, prefix: str = "") -> dict[str, object]:
    if isinstance(doc, dict):
        out: dict[str, object] = {}
        for k, v in doc.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: doc}


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _bench_env(admin_dsn: str, redis_url: str, log_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")]),
        "TETHER_BENCH_DATABASE_URL": admin_dsn,
        "TETHER_BENCH_REDIS_URL": redis_url,
        "TETHER_BENCH_LOG_DIR": str(log_dir),
    }


@pytest.mark.slow(seconds=59)
@pytest.mark.timeout(180)
def test_bench_quick_prints_every_figure(admin_dsn: str, redis_url: str, tmp_path: Path) -> None:
    env = _bench_env(admin_dsn, redis_url, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "tether_bench.main", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=160,  # the LangGraph scenario starts a runtime of its own (+~15 s)
    )
    assert proc.returncode == 0, f"bench-quick failed:\n{proc.stderr[-6000:]}"
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "quick"
    problems = []
    for key, fields in REQUIRED.items():
        if not isinstance(doc.get(key), dict):
            problems.append(f"{key}: missing")
            continue
        leaves = _leaves(doc[key])
        problems += [
            f"{key}.{f}: {leaves.get(f)!r}" for f in fields if not _is_number(leaves.get(f))
        ]
        # Every other figure under the key is a number too.
        problems += [f"{key}.{k}: {v!r}" for k, v in leaves.items() if not _is_number(v)]
    assert not problems, "figures missing or not numbers:\n" + "\n".join(problems)
    assert doc["cores"]["logical"] >= 1
    assert doc["fanout"]["events"] > 0 and doc["replay_10k_ms"]["events"] > 0
    # The floor made its I/O: each run's read, and its events' commits shared among runs.
    floor = doc["stack_floor"]
    assert 1 < floor["statements_per_run"] < 5, floor
    # with the admission's and the claim's statements besides
    assert floor["with_guarantees"]["statements_per_run"] > floor["statements_per_run"], floor
    # CPU per run by process for every scenario that starts runs (mcp_call starts none).
    by_scenario = doc["cpu_ms_per_run_by_scenario"]
    for name in ("first_event", "short_runs", "fanout", "fanout_split_runtime", "langgraph"):
        cpu = by_scenario[name]
        assert cpu["runs"] > 0, (name, cpu)
        for proc in ("runtime", "gateway", "postgres", "redis"):
            assert _is_number(cpu[f"{proc}_ms"]) and cpu[f"{proc}_ms"] >= 0, (name, proc, cpu)
    assert _is_number(by_scenario["fanout_split_runtime"]["runtime-worker_ms"])


@pytest.mark.slow(seconds=40)
@pytest.mark.timeout(180)
def test_bench_loop_counts_gives_each_process_its_timers_and_tasks_per_run(
    admin_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    """`--loop-counts`: every timer armed and task created by the runtime's and the gateway's
    loops, per run of the scenario, beside its CPU (tether_bench/loop_counts)."""
    env = _bench_env(admin_dsn, redis_url, tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "tether_bench.main", "--quick", "--only", "short_runs"]
        + ["--loop-counts"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=160,
    )
    assert proc.returncode == 0, f"bench --loop-counts failed:\n{proc.stderr[-6000:]}"
    cpu = json.loads(proc.stdout)["cpu_ms_per_run_by_scenario"]["short_runs"]
    assert cpu["runs"] > 0
    # A short run is at least a start call, a stream and a few statements on each side: neither
    # process runs one without a timer or a task, nor with hundreds.
    for name in ("runtime", "gateway"):
        for kind in ("timers", "tasks"):
            value = cpu[f"{name}_{kind}_per_run"]
            assert _is_number(value) and 1 <= value < 100, (name, kind, cpu)
