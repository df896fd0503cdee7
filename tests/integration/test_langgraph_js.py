"""Tether as a LangGraph server for JavaScript: the official `@langchain/langgraph-sdk` Client,
unmodified, on real processes (one runtime, two gateways) driving the native opspilot agent
(js/langgraph_sdk_flow.mjs): a stream to the interrupt on one pod, exact `joinStream`s with
`lastEventId` from several cut points on the other, two resumes at once that are one restart,
and the finished runs listed and joined."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.node import run_node
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.secrets import TEST_SECRET

SCRIPT = Path(__file__).parent / "js" / "langgraph_sdk_flow.mjs"

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def gateways(runtime: Proc, base_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    a = start_gateway(base_env, runtime.addr, name="gateway-lgjs-a")
    b = start_gateway(base_env, runtime.addr, name="gateway-lgjs-b")
    yield a.addr, b.addr
    for proc in (a, b):
        proc.terminate()


async def test_the_js_sdk_streams_joins_exactly_and_resumes_once_across_pods(gateways, db):
    service, instance = await abnormal_service(db, prefix="lgjs")
    token = issue_token(TEST_SECRET, "alice")
    r = await run_node(str(SCRIPT), gateways[0], gateways[1], token, service)

    assert r["createdRunId"] == r["runId"] and r["createdThreadId"] == r["threadId"]
    assert r["events"][0] == "metadata" and r["events"][-1] == "values", r["events"]
    assert "updates" in r["events"], r["events"]
    assert r["interruptKind"] == "confirm_action" and len(r["interruptId"]) == 32
    # The stream ended at the interrupt with its run over, the thread waiting on a person.
    assert r["pausedRunStatus"] == "success"
    assert r["pausedThreadStatus"] == "interrupted"
    assert r["stateInterrupts"] == [r["interruptId"]]

    n = len(r["events"])
    assert [j["cut"] for j in r["joins"]] == [0, 1, n // 2, n - 1, n]
    for join in r["joins"]:
        assert join["exact"], join
        assert join["count"] == n - join["cut"], join
    assert r["oneModeExact"] and r["noModeExact"]

    # Two resumes at once: the same stream twice, one restart.
    assert r["resumesEqual"]
    assert r["resumedFirstEvent"] == "metadata" and r["resumedId"] != r["runId"]
    assert not r["resumedHasInterrupt"]
    assert r["resumedTools"], "the restart's result comes as a tool message"
    assert r["text"].strip() and r["text"] == r["finalText"] and r["finalType"] == "ai"
    assert await executions(db, instance) == 1
    assert r["rejoinedExact"]
    assert r["listed"] == [[r["resumedId"], "success"], [r["runId"], "success"]]
    assert r["threadStatus"] == "idle"
