"""The demo web UI in headless Chromium against real runtime and gateway processes."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from tether.runtime.v1 import resources_pb2
from tether_common.event_json import run_json, sse_frame
from tether_runtime import events as ev
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service
from tether_testkit.processes import Proc, start_gateway, start_runtime

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "js" / "ui_flow.mjs"
SCREENSHOT = ROOT / "docs" / "screenshot.png"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """Its own seeded database: the flow restarts the demo's one abnormal payment-api instance."""
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield dsn
    asyncio.run(stores.drop_database(admin_dsn, dsn))


@pytest.fixture(scope="module")
def stack(fresh_database: str, base_env: dict[str, str]) -> Iterator[tuple[Proc, Proc]]:
    env = {**base_env, "DATABASE_URL": fresh_database, "TETHER_SCRIPTED_DELAY_S": "0.01"}
    rt = start_runtime(env, name="runtime-browser")
    gw = start_gateway(env, rt.addr, name="gateway-browser")
    yield rt, gw
    gw.terminate()
    rt.terminate()


async def _services(dsn: str) -> tuple[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        reload_service, _ = await abnormal_service(conn, prefix="ui")
        tabs_service, _ = await abnormal_service(conn, prefix="ui")
    finally:
        await conn.close()
    return reload_service, tabs_service


MOCK_CONVERSATION = "conv_ui_mock"
UNKNOWN_PAYLOAD = {
    "risk": "high",
    "target": "instance payment-api-2 (payment-api/prod)",
    "tool": "restart_instance",
    "parameter_summary": "instance_id=payment-api-2",
    "reason": "the runtime stopped while the restart was in flight",
}
CONFIRM_PAYLOAD = {
    **UNKNOWN_PAYLOAD,
    "reason": "it is abnormal",
    "title": "Restart payment-api-2?",
    "details": "Its open connections are dropped.",
    "preview": "POST /instances/payment-api-2/restart",
}


def _mocked_run(run_id: str, kind: str, payload: dict[str, str], *, progress: bool) -> Any:
    """A paused run as the gateway would serve it: events from the runtime's own builders,
    framed by the gateway's own serializer. The engine raises neither tool_progress nor
    outcome_unknown yet, so the browser gets these through mocked routes."""
    expires = datetime.now(UTC) + timedelta(minutes=10)
    built = [ev.run_started(MOCK_CONVERSATION)]
    if progress:
        built += [
            ev.tool_started("call_ui_1", "restart_instance", "instance_id=payment-api-2"),
            ev.tool_progress("call_ui_1", "restart_instance", 0.4, "draining connections"),
        ]
    built.append(ev.interrupt(f"int_{run_id}", kind, payload, expires))
    frames = []
    for seq, e in enumerate(built, start=1):
        e.run_id, e.sequence = run_id, seq
        e.time.GetCurrentTime()
        frames.append(sse_frame(e).decode())
    run = resources_pb2.Run(
        id=run_id,
        conversation_id=MOCK_CONVERSATION,
        agent="opspilot",
        status=resources_pb2.RUN_STATUS_INTERRUPTED,
        last_sequence=len(built),
        pending_interrupt=resources_pb2.Interrupt(
            id=f"int_{run_id}",
            run_id=run_id,
            kind=ev.KINDS[kind],
            status=resources_pb2.INTERRUPT_STATUS_PENDING,
            payload=ev.payload_message(payload),
            expire_time=ev.timestamp(expires),
        ),
    )
    return {"run": run_json(run), "sse": "".join(frames)}


def _mock_file(directory: Path) -> Path:
    path = directory / "ui_mock.json"
    runs = {
        "run_ui_unknown": _mocked_run(
            "run_ui_unknown", "outcome_unknown", UNKNOWN_PAYLOAD, progress=True
        ),
        "run_ui_confirm": _mocked_run(
            "run_ui_confirm", "confirm_action", CONFIRM_PAYLOAD, progress=False
        ),
    }
    path.write_text(json.dumps({"conversationId": MOCK_CONVERSATION, "runs": runs}))
    return path


def test_ui_approve_reload_and_second_tab(
    stack: tuple[Proc, Proc], fresh_database: str, tmp_path: Path
) -> None:
    node = shutil.which("node")
    assert node, "node is required for the browser test"
    assert Path("/usr/bin/chromium").exists(), "headless Chromium is required at /usr/bin/chromium"
    reload_service, tabs_service = asyncio.run(_services(fresh_database))
    SCREENSHOT.parent.mkdir(exist_ok=True)
    proc = subprocess.run(
        [
            node,
            str(SCRIPT),
            stack[1].addr,
            reload_service,
            tabs_service,
            str(SCREENSHOT),
            str(_mock_file(tmp_path)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "UI-FLOW-OK" in proc.stdout, output
    assert SCREENSHOT.stat().st_size > 10_000
