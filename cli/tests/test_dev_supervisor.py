"""`tether dev` as a supervisor: when one of its processes dies it stops everything and fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tether_testkit.ports import free_port

pytestmark = pytest.mark.process  # starts processes: `make test` only, not test-fast

SCRUBBED = (
    "DATABASE_URL",
    "REDIS_URL",
    "TETHER_ENV",
    "TETHER_RUNTIME_TARGET",
    "TETHER_JWT_SECRET",
    "TETHER_DEFAULT_AGENT",
)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_dead_service_stops_everything_with_a_failure(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED} | {
        "TETHER_DEV_DIR": str(tmp_path / "dev"),
        "TETHER_HTTP_ADDR": f"127.0.0.1:{free_port()}",
        "TETHER_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "TETHER_DRAIN_S": "3",
    }
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        dev = subprocess.Popen(
            [sys.executable, "-m", "tether_cli.main", "dev"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "export TETHER_TOKEN=" not in log.read_text(errors="replace"):
            assert dev.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        children = psutil.Process(dev.pid).children(recursive=True)
        runtime = next(p for p in children if "tether_cli.main runtime" in " ".join(p.cmdline()))
        # `tether dev` is OpsPilot's demo: its runs default to OpsPilot beside the mailer (the
        # core configuration names no agent).
        assert runtime.environ()["TETHER_DEFAULT_AGENT"] == "opspilot"
        runtime.send_signal(signal.SIGKILL)
        assert dev.wait(60) == 1
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    text = log.read_text(errors="replace")
    assert "runtime exited with code -9; stopping everything" in text, text
    assert "Tether stopped." in text
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], text
