"""The demo web UI in headless Chromium against real runtime and gateway processes."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
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


def test_ui_approve_reload_and_second_tab(stack: tuple[Proc, Proc], fresh_database: str) -> None:
    node = shutil.which("node")
    assert node, "node is required for the browser test"
    assert Path("/usr/bin/chromium").exists(), "headless Chromium is required at /usr/bin/chromium"
    reload_service, tabs_service = asyncio.run(_services(fresh_database))
    SCREENSHOT.parent.mkdir(exist_ok=True)
    proc = subprocess.run(
        [node, str(SCRIPT), stack[1].addr, reload_service, tabs_service, str(SCREENSHOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "UI-FLOW-OK" in proc.stdout, output
    assert SCREENSHOT.stat().st_size > 10_000
