"""Node scripts that print one `RESULT <json>` line (tests/integration/js/*.mjs), run from the
repository's root (its node_modules)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


async def run_node(*args: str, timeout: float = 120) -> dict[str, Any]:
    """`node ARGS` to its end; its RESULT document (the test fails with its output otherwise)."""
    node = shutil.which("node")
    assert node, "node (20+) is required for the JS tests"
    proc = await asyncio.create_subprocess_exec(
        node, *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(f"node timed out:\n{out.decode()}") from None
    output = out.decode()
    assert proc.returncode == 0, output
    line = next((ln for ln in output.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, output
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return result
