"""The LangGraph ops graph, unmodified, through the official `langgraph-sdk` client against
Tether's /langgraph mount (one runtime, two gateways): the stream ends at the graph's own
`interrupt()` with its run `success` and the thread `interrupted`, the resume on the other pod
is a new LangGraph run that restarts the service once, and joins from any cut point replay the
exact tail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from tether_common.auth import issue_token
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET

STARTUP_S = 90  # a runtime loading a graph imports langchain and langgraph
MODES = ["values", "updates", "messages-tuple", "custom"]
ASK = "checkout is slow, restart it if it is unhealthy"

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.timeout(240)]


def client(base: str) -> LangGraphClient:
    token = issue_token(TEST_SECRET, "alice")
    return get_client(url=f"{base}/langgraph", headers={"Authorization": f"Bearer {token}"})


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [part async for part in stream]


def wire(parts: list[Any]) -> list[tuple[str, Any, str | None]]:
    return [(p.event, p.data, p.id) for p in parts]


async def restarts(db: Any) -> int:
    return int(await db.fetchval("SELECT count(*) FROM lgops_restart WHERE service = 'checkout'"))


async def test_langgraph_sdk_interrupt_then_resume_on_the_other_pod(env, procs, db):
    runtime = start_runtime(env, name="runtime-lgops-lg", timeout=STARTUP_S)
    procs.append(runtime)
    gw_a = start_gateway(env, runtime.addr, name="gateway-lg-a")
    gw_b = start_gateway(env, runtime.addr, name="gateway-lg-b")
    procs.extend([gw_a, gw_b])
    a, b = client(gw_a.addr), client(gw_b.addr)
    try:
        assert "lgops" in [x["graph_id"] for x in await a.assistants.search()]
        t = (await a.threads.create())["thread_id"]
        first = await collect(
            a.runs.stream(
                t,
                "lgops",
                input={"messages": [{"role": "user", "content": ASK}]},
                stream_mode=MODES,
            )
        )
        assert first[0].event == "metadata"
        run_id = first[0].data["run_id"]
        text = "".join(p.data[0]["content"] for p in first if p.event == "messages")
        assert "Let me check checkout first." in text
        updates = [p.data for p in first if p.event == "updates"]
        interrupt = updates[-1]["__interrupt__"][0]
        assert interrupt["value"]["kind"] == "confirm_action"
        assert interrupt["value"]["title"] == "Restart checkout"
        assert first[-1].event == "values" and first[-1].data["__interrupt__"] == [interrupt]
        assert (await b.runs.get(t, run_id))["status"] == "success"
        assert (await b.threads.get(t))["status"] == "interrupted"
        assert await restarts(db) == 0, "nothing is restarted before a person approves"

        for cut in (0, len(first) // 3, len(first) - 1):
            last = "0" if cut == 0 else first[cut - 1].id
            joined = await collect(
                b.runs.join_stream(t, run_id, stream_mode=MODES, last_event_id=last)
            )
            assert wire(joined) == wire(first[cut:]), cut

        rest = await collect(b.runs.stream(t, "lgops", command={"resume": True}, stream_mode=MODES))
        resumed = rest[0].data["run_id"]
        assert rest[0].event == "metadata" and resumed != run_id
        text = "".join(p.data[0]["content"] for p in rest if p.event == "messages")
        assert "Done: checkout was restarted and is healthy again." in text
        assert not any("__interrupt__" in p.data for p in rest if p.event == "values")
        assert await restarts(db) == 1
        assert [r["run_id"] for r in await a.runs.list(t)] == [resumed, run_id]
        assert (await a.threads.get(t))["status"] == "idle"
    finally:
        await a.aclose()
        await b.aclose()
