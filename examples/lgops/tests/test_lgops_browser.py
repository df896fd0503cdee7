"""The LangGraph ops example, unmodified, in the web UI (headless Chromium) on two gateway pods:
alice signs in on pod A, picks the lgops agent and asks; the graph's text streams and its
`interrupt()` shows as a confirm card. In another browser she approves the same run on pod B;
pod A's page closes its card and streams to done (js/lgops_flow.mjs). Then the run's persisted
events, replayed from 0: dense 1..N, the text pod A's page showed is exactly the streamed text
(no word lost or doubled on the page), and the restart was performed exactly once."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tether_common.auth import issue_token
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.sse import SseReader

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = Path(__file__).parent / "js" / "lgops_flow.mjs"
# A runtime loading a graph imports langchain and langgraph: slower to start on a busy machine.
STARTUP_S = 90

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]


async def replay(gateway: str, run_id: str) -> list[Any]:
    """The run's whole event stream from pod `gateway`, from 0."""
    bearer = issue_token(TEST_SECRET, "alice")
    headers = {
        "Authorization": f"Bearer {bearer}",
        "Accept": "text/event-stream",
        "Last-Event-ID": "0",
    }
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        resp = await http.get(f"{gateway}/v1/runs/{run_id}/events", headers=headers)
        frames = await SseReader(resp).rest()
        resp.close()
    return [f for f in frames if f.kind == "event"]


async def drive(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 150)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        return -1, out.decode()
    return proc.returncode or 0, out.decode()


async def test_the_graph_in_the_web_ui_approved_on_another_pod(env, procs, db):
    node = shutil.which("node")
    assert node, "node is required for the browser test"
    assert Path("/usr/bin/chromium").exists(), "headless Chromium is required at /usr/bin/chromium"
    ui_env = {**env, "TETHER_DEV_LOGIN": "1"}  # the UI signs in by user name
    runtime = start_runtime(ui_env, name="runtime-lgops-ui", timeout=STARTUP_S)
    procs.append(runtime)
    a = start_gateway(ui_env, runtime.addr, name="gateway-ui-a")
    b = start_gateway(ui_env, runtime.addr, name="gateway-ui-b")
    procs.extend([a, b])

    code, output = await drive(node, str(SCRIPT), a.addr, b.addr)
    assert code == 0 and "LGOPS-UI-OK" in output, output
    result = json.loads(next(ln for ln in output.splitlines() if ln.startswith("RESULT "))[7:])

    frames = await replay(b.addr, result["runId"])
    ids = [int(f.id or 0) for f in frames]
    assert ids == list(range(1, len(ids) + 1)), ids
    kinds = [f.event for f in frames]
    assert kinds[0] == "run_started" and kinds[-1] == "done", kinds
    assert kinds.count("interrupt") == 1 and kinds.count("interrupt_resolved") == 1, kinds
    streamed = "".join(f.json["delta"] for f in frames if f.event == "text_delta")
    assert result["text"] == streamed, (result["text"], streamed)
    assert result["textAtCard"] and streamed.startswith(result["textAtCard"])
    started = [(f.json["callId"], f.json["tool"]) for f in frames if f.event == "tool_started"]
    finished = [(f.json["callId"], f.json["tool"]) for f in frames if f.event == "tool_finished"]
    assert [t for _, t in started] == ["get_service_status", "restart_service"], started
    assert sorted(started) == sorted(finished), "each call started and finished once"
    assert result["steps"] == [
        ["get_service_status", "success"],
        ["restart_service", "success"],
    ], result["steps"]
    assert await db.fetchval("SELECT count(*) FROM lgops_restart") == 1
    status = await db.fetchval("SELECT status FROM lgops_service WHERE name = 'checkout'")
    assert status == "healthy"
