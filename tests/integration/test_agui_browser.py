"""AG-UI in a React page, on two clients: the official `@ag-ui/client` HttpAgent in a plain React
page (agui_page/), and CopilotKit v2 (`@copilotkit/react-core/v2`: its provider with Tether as a
self-managed agent, `useAgent`, `useInterrupt`; copilotkit_page/), each built with Vite and
served from its own origin, so its calls to the gateways' /agui are cross-origin
(TETHER_AGUI_CORS_ORIGINS). Driven in headless Chromium (js/agui_page_flow.mjs, the same steps
for both) on real processes (one runtime, two gateways): the approval card appears on pod A; the
page loaded again on pod B while the card waits finds its run again (AG-UI's `connectAgent`,
implemented with Tether's reconnect) and shows the same card; Approve, double-clicked there,
finishes the run with one restart."""

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

PAGES = Path(__file__).parent
SCRIPT = Path(__file__).parent / "js" / "agui_page_flow.mjs"

pytestmark = [pytest.mark.process, pytest.mark.browser, pytest.mark.timeout(240)]


@pytest.fixture(params=["agui_page", "copilotkit_page"])
async def page_origin(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, str, str]]:
    """The page's name, its origin and its URL."""
    async with served_page(PAGES / request.param, tmp_path / "page") as (origin, url):
        yield request.param, origin, url


async def test_the_card_survives_a_reload_on_another_pod_and_approves_once(
    private_env, private_db, procs, page_origin
):
    assert shutil.which("chromium") or Path("/usr/bin/chromium").exists(), "needs chromium"
    page, origin, url = page_origin
    gw_env = {**private_env, "TETHER_AGUI_CORS_ORIGINS": origin}
    runtime = start_runtime(private_env, name=f"runtime-agui-{page}")
    procs.append(runtime)
    a = start_gateway(gw_env, runtime.addr, name=f"gateway-agui-{page}-a")
    b = start_gateway(gw_env, runtime.addr, name=f"gateway-agui-{page}-b")
    procs.extend([a, b])
    service, instance = await abnormal_service(private_db, prefix="aguipage")
    token = issue_token(TEST_SECRET, "alice")

    r = await run_node(str(SCRIPT), url, a.addr, b.addr, token, service, timeout=180)
    assert r["problems"] == [], r["problems"]

    # The card on pod A, and the same card after the reload on pod B.
    assert r["before"]["reason"] == "tool_approval" and r["before"]["message"]
    assert r["after"] == r["before"]
    # The page's own copy of the question was replaced by Tether's stored one (the snapshot),
    # and after the reload the conversation is there again, the question first.
    question = r["atCard"][0]
    assert question[0] == "user" and question[1].startswith("msg_"), r["atCard"]
    assert r["afterReload"] == r["atCard"]
    # The reload asked pod B for the run's events (the reconnect), not for a new run.
    reload_calls = [q for q in r["requests"] if q["url"].startswith(b.addr)]
    assert reload_calls[0]["method"] == "GET" and reload_calls[0]["url"].endswith("/events")
    # The double click: one answer sent or two, one restart; the run finished in the page.
    answers = [q for q in r["requests"] if q["resume"]]
    assert answers and all(q["resume"][0]["interruptId"] == r["before"]["id"] for q in answers)
    assert await executions(private_db, instance) == 1
    final = r["final"]
    assert final[-1][0] == "assistant" and final[-1][2], final
    assert any(m[0] == "tool" and "restarted" in m[2] for m in final), final
    # No rendering showed a message twice.
    for shown in r["renders"]:
        ids = [m[1] for m in shown]
        assert len(ids) == len(set(ids)), shown
