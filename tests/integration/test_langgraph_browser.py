"""Tether as a LangGraph server for a React app: `useStream` from `@langchain/langgraph-sdk/react`,
unmodified, in a page built with Vite (langgraph_page/) and served from its own origin, so its
calls to the gateways' /langgraph are cross-origin (TETHER_LANGGRAPH_CORS_ORIGINS). Driven in
headless Chromium (js/langgraph_page_flow.mjs) on real processes (one runtime, two gateways):
the interrupt shows in the page and its Approve resumes the run to the end, with one restart;
a page loaded again on the other pod in the middle of a stream rejoins it (reconnectOnMount)
and every rendering of the messages shows each once, in order, never cut or doubled."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.vite_pages import run, served_page

PAGE = Path(__file__).parent / "langgraph_page"
SCRIPT = Path(__file__).parent / "js" / "langgraph_page_flow.mjs"
DELTAS = 250  # 5 s at 20 ms each: the reload lands mid-stream even on a busy machine

pytestmark = [pytest.mark.process, pytest.mark.browser, pytest.mark.timeout(240)]

Rendered = list[list[str]]  # [[type, id, text], ...]


@pytest.fixture
async def page_origin(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """The page built with Vite into a temporary folder and served on a port of its own: (its
    origin, its URL)."""
    async with served_page(PAGE, tmp_path / "page") as served:
        yield served


def lg_state(base: str, thread_id: str) -> Any:
    token = issue_token(TEST_SECRET, "alice")
    client = get_client(url=f"{base}/langgraph", headers={"Authorization": f"Bearer {token}"})
    return client, client.threads.get_state(thread_id)


async def state_messages(base: str, thread_id: str) -> Rendered:
    """The thread's messages as the gateway's state has them, as the page renders them."""
    client, pending = lg_state(base, thread_id)
    try:
        state = await pending
    finally:
        await client.aclose()
    return [[m["type"], m["id"], m["content"]] for m in state["values"]["messages"]]


def assert_each_once_in_order(
    renders: list[Rendered], final: Rendered, *, ends_complete: bool = True
) -> None:
    """Every rendering of the list: each message once, in the final order, its text a prefix
    of its final text (never doubled, never a piece lost in the middle); the last one complete
    unless the page was left before the end."""
    order = [m[1] for m in final]
    texts = {m[1]: m[2] for m in final}
    assert renders, "the page rendered the messages"
    if ends_complete:
        assert renders[-1] == final, (renders[-1:], final)
    for shown in renders:
        ids = [m[1] for m in shown]
        assert len(ids) == len(set(ids)), f"a message shown twice: {shown}"
        assert all(i in texts for i in ids), f"a message not in the thread: {shown}"
        assert ids == sorted(ids, key=order.index), f"out of order: {shown}"
        for _, message_id, text in shown:
            assert texts[message_id].startswith(text), (text, texts[message_id])


async def test_use_stream_interrupt_resume_and_a_reload_that_rejoins(
    private_env, private_db, procs, page_origin
):
    origin, url = page_origin
    env = {**private_env, "TETHER_SCRIPTED_DELAY_S": "0.02"}
    gw_env = {**env, "TETHER_LANGGRAPH_CORS_ORIGINS": origin}
    runtime = start_runtime(env, name="runtime-lg-page")
    procs.append(runtime)
    a = start_gateway(gw_env, runtime.addr, name="gateway-lg-page-a")
    b = start_gateway(gw_env, runtime.addr, name="gateway-lg-page-b")
    procs.extend([a, b])
    service, instance = await abnormal_service(private_db, prefix="lgpage")
    token = issue_token(TEST_SECRET, "alice")

    node = shutil.which("node")
    assert node
    output = await run(
        node, str(SCRIPT), url, a.addr, b.addr, token, service, str(DELTAS), timeout=180
    )
    line = next((ln for ln in output.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, output
    print("\n".join(ln for ln in output.splitlines() if ln.startswith("[lg-page")))
    r = json.loads(line.removeprefix("RESULT "))
    assert r["problems"] == [], r["problems"]

    # Flow 1: the interrupt in the page, approved there: one restart, the thread's messages.
    assert r["interrupt"]["kind"] == "confirm_action", r["interrupt"]
    assert r["atInterrupt"][0][0] == "human", r["atInterrupt"]
    assert await executions(private_db, instance) == 1
    thread1 = await state_messages(b.addr, r["thread1"])
    assert r["resumed"] == thread1
    assert thread1[-1][0] == "ai" and thread1[-1][2], thread1
    assert_each_once_in_order(r["renders1"], thread1)

    # Flow 2: loaded again on pod B mid-stream, the page rejoined the run from its start and
    # showed it to the end.
    full = "".join(f"t{i} " for i in range(DELTAS))
    assert r["stored"], "useStream kept the run's id (Content-Location, exposed by CORS)"
    assert r["storedAfter"] is None, "and forgot it once the run was over"
    ai_at_reload = [m[2] for m in r["atReload"] if m[0] == "ai"]
    assert ai_at_reload and full.startswith(ai_at_reload[0]) and ai_at_reload[0] != full
    assert r["rejoins"] and all(j["url"].startswith(b.addr) for j in r["rejoins"]), r["rejoins"]
    assert r["rejoins"][0]["lastEventId"] == "-1" and r["stored"] in r["rejoins"][0]["url"]
    thread2 = await state_messages(a.addr, r["thread2"])
    assert [(m[0], m[2]) for m in thread2] == [("human", f"stream {DELTAS} deltas"), ("ai", full)]
    assert r["final"] == thread2
    assert_each_once_in_order(r["rendersBefore"], thread2, ends_complete=False)
    assert_each_once_in_order(r["rendersAfter"], thread2)
