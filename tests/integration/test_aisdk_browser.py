"""The AI SDK in a React page: `useChat` from `@ai-sdk/react` with `DefaultChatTransport`, in a
page built with Vite (aisdk_page/) and served from its own origin, so its calls to the gateways'
/ai-sdk are cross-origin (TETHER_AGUI_CORS_ORIGINS). Driven in headless Chromium
(js/aisdk_page_flow.mjs) on real processes (one runtime, two gateways): ask on pod A, the
approval part appears, Approve double-clicked: one restart, the tool's output and the final text
in the page; a second answer cut by a reload on pod B resumes (useChat's `resume`, GET
.../stream) with no word repeated or lost."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tether_common.auth import issue_token
from tether_testkit.inventory import abnormal_service, executions
from tether_testkit.node import run_node
from tether_testkit.processes import start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.vite_pages import served_page

PAGE = Path(__file__).parent / "aisdk_page"
SCRIPT = Path(__file__).parent / "js" / "aisdk_page_flow.mjs"

pytestmark = [pytest.mark.process, pytest.mark.browser, pytest.mark.timeout(240)]


@pytest.fixture
async def page_origin(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    async with served_page(PAGE, tmp_path / "page") as served:
        yield served


async def test_use_chat_approves_once_and_resumes_a_reload_on_another_pod(
    private_env, private_db, procs, page_origin
):
    assert shutil.which("chromium") or Path("/usr/bin/chromium").exists(), "needs chromium"
    origin, url = page_origin
    # Words slow enough that the reload lands in the middle of the answer.
    env = {**private_env, "TETHER_SCRIPTED_DELAY_S": "0.15"}
    gw_env = {**env, "TETHER_AGUI_CORS_ORIGINS": origin}
    runtime = start_runtime(env, name="runtime-aisdk-page")
    procs.append(runtime)
    a = start_gateway(gw_env, runtime.addr, name="gateway-aisdk-page-a")
    b = start_gateway(gw_env, runtime.addr, name="gateway-aisdk-page-b")
    procs.extend([a, b])
    service, instance = await abnormal_service(private_db, prefix="aisdkpage")
    token = issue_token(TEST_SECRET, "alice")

    r = await run_node(str(SCRIPT), url, a.addr, b.addr, token, service, timeout=180)
    assert r["problems"] == [], r["problems"]

    # The approval part, then the double click: one restart, its output and the final text.
    assert r["approval"]["id"].startswith("int_")
    assert r["approval"]["tool"] == "tool-restart_instance"
    assert await executions(private_db, instance) == 1
    assert [
        "tool-restart_instance",
        "output-available",
        f"restarted {instance}; it is healthy",
    ] in (r["tools"]), r["tools"]
    roles = [m[0] for m in r["afterApproval"]]
    assert roles == ["user", "assistant"], r["afterApproval"]
    assert r["afterApproval"][1][2].startswith("Done: restarted"), r["afterApproval"]
    approvals = [q for q in r["requests"] if q["method"] == "POST" and q["last"] == "assistant"]
    assert len(approvals) == 1, r["requests"]

    # The reload on pod B in the middle of the second answer: useChat's resume GET, then the
    # answer whole, exactly as Tether stored it, and never a word twice on the way.
    before = r["beforeReload"][3][2]
    final = r["final"]
    assert [m[1] for m in final] == [m[1] for m in r["beforeReload"]], "the same messages"
    stored = await private_db.fetchval(
        "SELECT content FROM message WHERE role = 'assistant' ORDER BY created_at DESC, id DESC"
        " LIMIT 1"
    )
    assert final[3][2] == stored and stored.startswith(before) and len(stored) > len(before)
    resumes = [q for q in r["requests"] if q["method"] == "GET" and q["url"].startswith(b.addr)]
    assert resumes and all(q["url"].endswith("/stream") for q in resumes), r["requests"]
    for shown in r["renders"]:
        ids = [m[1] for m in shown]
        assert len(ids) == len(set(ids)), shown
        texts = [m[2] for m in shown if m[1] == final[3][1]]
        assert all(stored.startswith(t) for t in texts), (texts, stored)
