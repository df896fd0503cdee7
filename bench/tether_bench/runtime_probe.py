"""The runtime alone, over gRPC, as an internal service sees it: how many read-only runs one
runtime completes per second, and the time from ResumeRun to the `tool_started` event.

    PYTHONPATH=bench uv run --frozen python -m tether_bench.runtime_probe [--runs 300]

Prints one JSON document. Stores: TETHER_BENCH_DATABASE_URL (admin DSN), TETHER_BENCH_REDIS_URL."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid

import grpc
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1 import runtime_service_pb2_grpc as pb_grpc
from tether_common.auth import issue_token

from tether_bench.stack import create_database, drop_database, start_runtime

SECRET = "bench-secret-0123456789abcdef0123456789abcdef"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def stream_until(
    stub: pb_grpc.RuntimeServiceStub, md: tuple, run_id: str, after: int, kind: str
) -> tuple[float, list[events_pb2.RunEvent]]:
    out: list[events_pb2.RunEvent] = []
    call = stub.StreamRunEvents(
        pb.StreamRunEventsRequest(run_id=run_id, after_sequence=after), metadata=md, timeout=60
    )
    async for resp in call:
        for ev in resp.events:
            out.append(ev)
            if ev.WhichOneof("event") == kind:
                call.cancel()
                return time.perf_counter(), out
    return time.perf_counter(), out


async def read_only_throughput(
    stub: pb_grpc.RuntimeServiceStub, md: tuple, runs: int, concurrency: int
) -> dict[str, float]:
    convs = [
        (
            await stub.CreateConversation(
                pb.CreateConversationRequest(title="probe"), metadata=md, timeout=10
            )
        ).conversation.id
        for _ in range(concurrency)
    ]
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> None:
        async with gate:
            t0 = time.perf_counter()
            run = (
                await stub.StartRun(
                    pb.StartRunRequest(
                        conversation_id=convs[i % concurrency],
                        text="show recent errors of payment-api",
                    ),
                    metadata=md,
                    timeout=10,
                )
            ).run
            t1, evs = await stream_until(stub, md, run.id, 0, "done")
            assert evs[-1].WhichOneof("event") == "done"
            latencies.append((t1 - t0) * 1000)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(runs)))
    elapsed = time.perf_counter() - start
    return {
        "runs": runs,
        "concurrency": concurrency,
        "runs_per_s": round(runs / elapsed, 1),
        "run_ms_p50": pct(latencies, 0.5),
        "run_ms_p99": pct(latencies, 0.99),
    }


async def resume_to_tool_started(
    stub: pb_grpc.RuntimeServiceStub, md: tuple, dsn: str, samples: int
) -> dict[str, float]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    times: list[float] = []
    try:
        conv = (
            await stub.CreateConversation(
                pb.CreateConversationRequest(title="resume"), metadata=md, timeout=10
            )
        ).conversation.id
        for i in range(samples):
            service = f"probe-{uuid.uuid4().hex[:6]}-api".replace("0", "a").replace("1", "b")
            service = "".join(c if not c.isdigit() else "x" for c in service)
            await conn.execute("INSERT INTO inv_service VALUES ($1, 'prod', 1)", service)
            await conn.execute(
                "INSERT INTO inv_instance (id, service, env, status) "
                "VALUES ($1, $2, 'prod', 'abnormal')",
                f"{service}-1",
                service,
            )
            run = (
                await stub.StartRun(
                    pb.StartRunRequest(
                        conversation_id=conv, text=f"restart the abnormal {service} instance"
                    ),
                    metadata=md,
                    timeout=10,
                )
            ).run
            _, evs = await stream_until(stub, md, run.id, 0, "interrupt")
            interrupt = evs[-1]
            # Subscribe first (as a client already streaming would be), then resume.
            waiter = asyncio.create_task(
                stream_until(stub, md, run.id, interrupt.sequence, "tool_started")
            )
            await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            await stub.ResumeRun(
                pb.ResumeRunRequest(
                    run_id=run.id,
                    interrupt_id=interrupt.interrupt.interrupt_id,
                    decision=events_pb2.DECISION_APPROVED,
                    idempotency_key=uuid.uuid4().hex,
                ),
                metadata=md,
                timeout=10,
            )
            t1, _ = await waiter
            times.append((t1 - t0) * 1000)
            await stream_until(stub, md, run.id, interrupt.sequence, "done")
            del i
    finally:
        await conn.close()
    return {
        "samples": samples,
        "p50": pct(times, 0.5),
        "p99": pct(times, 0.99),
        "mean": round(statistics.fmean(times), 2),
    }


async def main(runs: int, concurrency: int, samples: int) -> dict[str, object]:
    admin = os.environ.get("TETHER_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    redis_url = os.environ.get("TETHER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    dsn, _ = await create_database(admin)
    env = {
        "DATABASE_URL": dsn,
        "REDIS_URL": redis_url,
        "TETHER_JWT_SECRET": SECRET,
        "TETHER_SCRIPTED_DELAY_S": "0",
        "TETHER_LOG_LEVEL": "WARNING",
        "TETHER_WORKER_CONCURRENCY": str(max(64, concurrency)),
    }
    runtime = await start_runtime(env)
    try:
        async with grpc.aio.insecure_channel(runtime.addr) as channel:
            stub = pb_grpc.RuntimeServiceStub(channel)
            md = (("authorization", f"Bearer {issue_token(SECRET, 'alice')}"),)
            await read_only_throughput(stub, md, min(20, runs), concurrency)  # warm-up
            return {
                "cores": os.cpu_count(),
                "read_only_runs": await read_only_throughput(stub, md, runs, concurrency),
                "resume_to_tool_started_ms": await resume_to_tool_started(stub, md, dsn, samples),
            }
    finally:
        await runtime.stop()
        await drop_database(admin, dsn)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--samples", type=int, default=30)
    a = parser.parse_args()
    print(json.dumps(asyncio.run(main(a.runs, a.concurrency, a.samples)), indent=2))
