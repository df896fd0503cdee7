"""Trace context crosses gRPC metadata and the queue: the run's steps continue the StartRun
caller's trace, and the continuation of a resumed run continues and links to the approval's."""

from __future__ import annotations

import json
import secrets

import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, token, types
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast


def traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-01"


def spans(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


async def test_trace_crosses_grpc_and_the_queue(private_env, private_db, tmp_path):
    trace_file = str(tmp_path / "spans.jsonl")
    proc = start_runtime({**private_env, "TETHER_TRACE_FILE": trace_file}, name="runtime-trace")
    try:
        c = Client(proc.addr, token(TEST_SECRET, "alice"))
        service, _ = await abnormal_service(private_db)
        conv = await c.conversation()
        start_trace, start_tp = traceparent()
        run = (
            await c.stub.StartRun(
                pb.StartRunRequest(
                    conversation_id=conv, text=f"restart the abnormal {service} instance"
                ),
                metadata=c.md + (("traceparent", start_tp),),
                timeout=10,
            )
        ).run
        evs = await c.events(run.id, until="interrupt")
        approve_trace, approve_tp = traceparent()
        await c.stub.ResumeRun(
            pb.ResumeRunRequest(
                run_id=run.id,
                interrupt_id=evs[-1].interrupt.interrupt_id,
                decision=1,
                idempotency_key=secrets.token_hex(8),
            ),
            metadata=c.md + (("traceparent", approve_tp),),
            timeout=10,
        )
        assert types(await c.events(run.id, after=evs[-1].sequence))[-1] == "done"
        await c.close()
    finally:
        proc.terminate()
    all_spans = spans(trace_file)
    by_name: dict[str, list[dict]] = {}
    for s in all_spans:
        by_name.setdefault(s["name"], []).append(s)
    trace_of = lambda s: s["context"]["trace_id"].removeprefix("0x")  # noqa: E731
    start_rpc = [s for s in by_name["RuntimeService/StartRun"] if trace_of(s) == start_trace]
    assert start_rpc, "StartRun span did not continue the caller's trace"
    executes = by_name["run.execute"]
    assert len(executes) == 2
    first, continuation = sorted(executes, key=lambda s: s["start_time"])
    assert trace_of(first) == start_trace
    assert trace_of(continuation) == approve_trace
    linked = [link["context"]["trace_id"].removeprefix("0x") for link in continuation["links"]]
    assert approve_trace in linked
    # Worker steps, tools and Postgres queries are inside those traces.
    assert any(
        s["name"] == "tool.restart_instance" and trace_of(s) == approve_trace for s in all_spans
    )
    assert any(s["name"] == "model.step" and trace_of(s) == start_trace for s in all_spans)
    assert any(
        s["attributes"].get("db.system") == "postgresql" and trace_of(s) == start_trace
        for s in all_spans
    )
