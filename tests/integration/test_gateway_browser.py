"""The demo web UI in headless Chromium against real runtime and gateway processes: OpsPilot's
confirm, select and input cards, and the ledger test agent's progress bar and outcome_unknown
card (the runtime killed inside its call, a new one started at the same address). All of it on
the HttpOnly session cookie under the page's Content-Security-Policy: ui_flow.mjs fails on a token
readable by scripts, a bearer sent after the login, a write without its CSRF token, or any CSP
violation."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from tether_testkit import stores
from tether_testkit.inventory import abnormal_service
from tether_testkit.ledger import AGENT_ENV, create_ledger_database
from tether_testkit.processes import free_port, start_gateway, start_runtime

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "js" / "ui_flow.mjs"
# README's screenshot: the test takes it in its own folder, and refreshes docs/screenshot.png only
# when asked (TETHER_UPDATE_SCREENSHOT=1), so a test run leaves the checkout clean.
README_SCREENSHOT = ROOT / "docs" / "screenshot.png"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """Its own seeded database (the flow restarts the demo's one abnormal payment-api instance)
    with the ledger agent's tables and alice's grant to send."""
    dsn = asyncio.run(create_ledger_database(admin_dsn))
    yield dsn
    asyncio.run(stores.drop_database(admin_dsn, dsn))


class Stack:
    """A runtime (replaceable at the same address) and a gateway configured with that address."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.addr = f"127.0.0.1:{free_port()}"
        # The ledger's calls are held open long enough to see their progress and kill inside.
        self.runtime = start_runtime({**env, "LEDGER_HOLD_S": "8"}, name="rt-ui", addr=self.addr)
        self.gateway = start_gateway(env, self.addr, name="gateway-browser")

    def replace_runtime(self) -> None:
        """kill -9 inside the call; a new runtime takes over the run at the same address."""
        self.runtime.kill()
        self.runtime = start_runtime(
            {**self.env, "LEDGER_HOLD_S": "0"}, name="rt-ui-2", addr=self.addr
        )

    def stop(self) -> None:
        self.gateway.terminate()
        self.runtime.terminate()


@pytest.fixture(scope="module")
def stack(fresh_database: str, base_env: dict[str, str]) -> Iterator[Stack]:
    env = {
        **base_env,
        **AGENT_ENV,
        "DATABASE_URL": fresh_database,
        "TETHER_SCRIPTED_DELAY_S": "0.01",
        # The UI signs in by user name (POST /v1/dev/token), as under `tether dev`.
        "TETHER_DEV_LOGIN": "1",
    }
    s = Stack(env)
    yield s
    s.stop()


async def _services(dsn: str) -> list[str]:
    """Fresh services for the reload, two-tab, select (two abnormal instances) and scale flows."""
    conn = await asyncpg.connect(dsn)
    try:
        names = [(await abnormal_service(conn, prefix="ui"))[0] for _ in range(4)]
        await conn.execute(
            "INSERT INTO inv_instance (id, service, env, status) "
            "VALUES ($1, $2, 'prod', 'abnormal')",
            f"{names[2]}-2",
            names[2],
        )
    finally:
        await conn.close()
    return names


async def _count(dsn: str, sql: str, *args: object) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(sql, *args))
    finally:
        await conn.close()


def _wait_effect(dsn: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while asyncio.run(_count(dsn, "SELECT count(*) FROM ledger_effect")) < 1:
        assert time.monotonic() < deadline, "the ledger call never took effect"
        time.sleep(0.1)


def test_ui_flows_on_the_real_system(stack: Stack, fresh_database: str, tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node is required for the browser test"
    assert Path("/usr/bin/chromium").exists(), "headless Chromium is required at /usr/bin/chromium"
    services = asyncio.run(_services(fresh_database))
    screenshot = tmp_path / "screenshot.png"
    args = [node, str(SCRIPT), stack.gateway.addr, *services, str(screenshot), str(tmp_path)]
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "KILL-NOW":
                # The browser shows the call's progress: kill once its effect happened (the
                # result not yet saved), so nobody can tell whether it did.
                _wait_effect(fresh_database)
                stack.replace_runtime()
                proc.stdin.write("restarted\n")
                proc.stdin.flush()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, 9)
            proc.wait()
    output = "".join(lines)
    assert proc.returncode == 0 and "UI-FLOW-OK" in output, output
    assert screenshot.stat().st_size > 10_000
    if os.environ.get("TETHER_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(screenshot, README_SCREENSHOT)
    _, _, select_service, scale_service = services
    assert asyncio.run(
        _count(
            fresh_database,
            "SELECT count(*) FROM inv_instance WHERE service = $1 AND status = 'healthy'"
            " AND id = $2",
            select_service,
            f"{select_service}-2",
        )
    ), "the chosen instance was restarted"
    replicas = asyncio.run(
        _count(fresh_database, "SELECT replicas FROM inv_service WHERE name = $1", scale_service)
    )
    assert replicas == 4
    assert asyncio.run(_count(fresh_database, "SELECT count(*) FROM ledger_effect")) == 1
