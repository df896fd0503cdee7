"""A full approve flow through a gateway and a runtime: the gateway's and the runtime's spans share
one trace, the resumed continuation continues and links to the approval's trace, and the metrics
of both services move."""

from __future__ import annotations

import json
import secrets
import urllib.request
import uuid
from pathlib import Path

import aiohttp
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import free_port, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET


def spans(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trace_of(span: dict) -> str:
    return str(span["context"]["trace_id"]).removeprefix("0x")


def metric(url: str, name: str, **labels: str) -> float:
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    total = 0.0
    for line in body.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, value = line.rpartition(" ")
        series = key[len(name) :]
        if series and not series.startswith("{"):
            continue  # another metric sharing the prefix
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


async def read_until(resp: aiohttp.ClientResponse, kind: str) -> list[dict]:
    events: list[dict] = []
    buf = ""
    async for chunk in resp.content.iter_any():
        buf += chunk.decode()
        while "\n\n" in buf:
            block, buf = buf.split("\n\n", 1)
            data = [ln[6:] for ln in block.split("\n") if ln.startswith("data: ")]
            if data:
                events.append(json.loads(data[0]))
                if events[-1]["type"] == kind:
                    return events
    return events


async def test_one_trace_from_gateway_to_worker_and_metrics_move(private_env, private_db, tmp_path):
    rt_trace, gw_trace = tmp_path / "runtime.jsonl", tmp_path / "gateway.jsonl"
    metrics_port = free_port()
    runtime = start_runtime(
        {
            **private_env,
            "TETHER_TRACE_FILE": str(rt_trace),
            "TETHER_METRICS_ADDR": f"127.0.0.1:{metrics_port}",
        },
        name="runtime-otel",
    )
    # The approval's traceparent comes from a caller the gateway trusts (an internal one); a
    # browser's is only linked (tests/integration/security/test_sec_traceparent.py).
    gateway = start_gateway(
        {**private_env, "TETHER_TRACE_FILE": str(gw_trace), "TETHER_TRUST_TRACEPARENT": "1"},
        runtime.addr,
        name="gateway-otel",
    )
    rt_metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    gw_metrics = f"{gateway.addr}/metrics"
    before = {
        "runs": metric(rt_metrics, "tether_runs_started_total"),
        "approved": metric(rt_metrics, "tether_resume_outcomes_total", outcome="approved"),
        "tools": metric(rt_metrics, "tether_tool_calls_total", tool="restart_instance"),
        "sse": metric(gw_metrics, "tether_gateway_sse_events_total"),
        "http": metric(gw_metrics, "tether_gateway_http_requests_total"),
    }
    try:
        service, _ = await abnormal_service(private_db)
        auth = {"Authorization": f"Bearer {issue_token(TEST_SECRET, 'alice')}"}
        async with aiohttp.ClientSession(headers=auth) as http:
            async with http.post(f"{gateway.addr}/v1/conversations", json={"title": "otel"}) as r:
                conv = (await r.json())["conversation"]["id"]
            async with http.post(
                f"{gateway.addr}/v1/conversations/{conv}/runs",
                json={"text": f"restart the abnormal {service} instance"},
                headers={"Accept": "text/event-stream"},
            ) as r:
                assert r.status in (200, 201)
                first = await read_until(r, "interrupt")
            run_id = first[0]["runId"]
            interrupt_id = first[-1]["interruptId"]
            approval_trace = secrets.token_hex(16)
            async with http.post(
                f"{gateway.addr}/v1/runs/{run_id}/resume",
                json={
                    "interruptId": interrupt_id,
                    "decision": "approve",
                    "idempotencyKey": uuid.uuid4().hex,
                },
                headers={"traceparent": f"00-{approval_trace}-{secrets.token_hex(8)}-01"},
            ) as r:
                assert r.status == 202, await r.text()
            async with http.get(
                f"{gateway.addr}/v1/runs/{run_id}/events",
                headers={"Last-Event-ID": str(first[-1]["sequence"])},
            ) as r:
                rest = await read_until(r, "done")
            assert rest[-1]["type"] == "done"
        after = {
            "runs": metric(rt_metrics, "tether_runs_started_total"),
            "approved": metric(rt_metrics, "tether_resume_outcomes_total", outcome="approved"),
            "tools": metric(rt_metrics, "tether_tool_calls_total", tool="restart_instance"),
            "sse": metric(gw_metrics, "tether_gateway_sse_events_total"),
            "http": metric(gw_metrics, "tether_gateway_http_requests_total"),
        }
        assert after["runs"] == before["runs"] + 1
        assert after["approved"] == before["approved"] + 1
        assert after["tools"] == before["tools"] + 1
        assert after["sse"] >= before["sse"] + len(first) + len(rest)
        assert after["http"] >= before["http"] + 4
        for name in (
            "tether_queue_depth",
            "tether_lease_takeovers_total",
            "tether_tool_gate_violations_total",
            "tether_grpc_request_seconds_bucket",
        ):
            assert name in urllib.request.urlopen(rt_metrics, timeout=5).read().decode()
        gw_body = urllib.request.urlopen(gw_metrics, timeout=5).read().decode()
        for name in (
            "tether_gateway_sse_connections",
            "tether_gateway_sse_heartbeats_total",
            "tether_gateway_sse_replays_total",
            "tether_gateway_sse_dropped_total",
            "tether_gateway_http_request_seconds_bucket",
        ):
            assert name in gw_body, name
        assert metric(gw_metrics, "tether_gateway_sse_replays_total") >= 1
    finally:
        gateway.terminate()
        runtime.terminate()

    gw_spans, rt_spans = spans(gw_trace), spans(rt_trace)
    start_http = next(
        s for s in gw_spans if s["name"].startswith("POST /v1/conversations/{id}/runs")
    )
    # The POST streams (Accept: text/event-stream): one call starts the run, whose events the
    # gateway follows on the bus (bus_feed.py).
    start_grpc = next(s for s in rt_spans if s["name"] == "RuntimeService/StartRun")
    assert trace_of(start_http) == trace_of(start_grpc), "gateway and runtime in different traces"
    assert start_grpc["parent_id"] is not None
    executes = sorted(
        (s for s in rt_spans if s["name"] == "run.execute"), key=lambda s: s["start_time"]
    )
    assert trace_of(executes[0]) == trace_of(start_http)
    resume_http = next(s for s in gw_spans if s["name"].startswith("POST /v1/runs/{id}/resume"))
    assert trace_of(resume_http) == approval_trace
    continuation = executes[-1]
    assert trace_of(continuation) == approval_trace
    assert approval_trace in [trace_of(link) for link in continuation["links"]]
    assert any(
        s["name"] == "tool.restart_instance" and trace_of(s) == approval_trace for s in rt_spans
    )
