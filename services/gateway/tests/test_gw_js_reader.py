"""Runs the web UI's own node tests (its question cards' pure part; the SSE reader and the rest of
the JS client are tested from tests/integration/test_js_client.py) so `make test` covers them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

JS_TESTS = Path(__file__).parent / "js"


def test_web_ui_modules_under_node() -> None:
    node = shutil.which("node")
    assert node, "node is required (the web UI's modules are tested with `node --test`)"
    proc = subprocess.run(
        [node, "--test", str(JS_TESTS)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "# fail 0" in proc.stdout
