"""The approvals page in headless Chromium against real runtime and gateway processes: carol (the
demo's on-call lead, approve:instance.restart on */*) has the Approvals view open when another
user's OpsPilot run pauses at a restart card; the card appears live (the inbox's SSE stream),
with who asked and the run's steps, and her approval runs the restart once."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from tether_testkit import stores
from tether_testkit.inventory import executions
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.security import new_user, owned_interrupted_run

SCRIPT = Path(__file__).parent / "js" / "approvals_flow.mjs"

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture
def fresh_database(admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield dsn
    asyncio.run(stores.drop_database(admin_dsn, dsn))


async def _pause(gw: str, dsn: str, user: str) -> dict[str, str]:
    db = await asyncpg.connect(dsn)
    try:
        async with aiohttp.ClientSession() as http:
            return await owned_interrupted_run(db, gw, http, user)
    finally:
        await db.close()


async def _settled(dsn: str, o: dict[str, str]) -> int:
    db = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + 20
        while await db.fetchval("SELECT status FROM run WHERE id = $1", o["run"]) != "completed":
            assert time.monotonic() < deadline, "the approved run never completed"
            await asyncio.sleep(0.05)
        return await executions(db, o["instance"])
    finally:
        await db.close()


def test_an_approvers_card_appears_live_and_is_approved(
    fresh_database: str, base_env: dict[str, str], procs: list[Proc], tmp_path: Path
) -> None:
    node = shutil.which("node")
    assert node, "node is required for the browser test"
    assert Path("/usr/bin/chromium").exists(), "headless Chromium is required at /usr/bin/chromium"
    env = {**base_env, "DATABASE_URL": fresh_database, "TETHER_DEV_LOGIN": "1"}
    rt = start_runtime(env, name="rt-approvals-ui")
    gw = start_gateway(env, rt.addr, name="gw-approvals-ui")
    procs.extend([rt, gw])
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [node, str(SCRIPT), gw.addr, str(tmp_path / "approvals.png")],
        cwd=root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines: list[str] = []
    paused: dict[str, str] = {}
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "READY":
                requester = new_user("junior")
                paused = asyncio.run(_pause(gw.addr, fresh_database, requester))
                proc.stdin.write(f"{paused['run']} {requester}\n")
                proc.stdin.flush()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, 9)
            proc.wait()
    output = "".join(lines)
    assert proc.returncode == 0 and "APPROVALS-FLOW-OK" in output, output
    assert asyncio.run(_settled(fresh_database, paused)) == 1
