"""The `--processes N` supervisor's policy with stand-in children (real processes, no services):
a dead child is restarted, a crash loop stops the pod, exit 2 stops it at once, SIGTERM reaches
every child; and the merged metrics label each child's samples with its slot."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tether_cli import pod as pod_mod
from tether_cli.pod import Pod
from tether_cli.pod_metrics import merge
from tether_common.config import Settings

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_mod, "BACKOFF_FIRST_S", 0.01)


def _pod(script: str, processes: int = 2) -> Pod:
    pod = Pod("runtime", Settings(drain_s=2.0), processes)
    pod.child_argv = (sys.executable, "-c", script)
    return pod


@pytest.mark.process  # starts a process: not in test-fast
async def test_a_crash_loop_stops_the_pod_with_an_error() -> None:
    pod = _pod("import sys; sys.exit(1)")
    assert await pod.run() == 1
    assert max(c.quick_deaths for c in pod.children.values()) == pod_mod.MAX_QUICK_DEATHS - 1


@pytest.mark.process  # starts a process: not in test-fast
async def test_a_refused_configuration_stops_the_pod_without_restarts() -> None:
    pod = _pod("import sys; sys.exit(2)")
    assert await pod.run() == 2
    assert all(c.quick_deaths == 0 for c in pod.children.values())


@pytest.mark.process  # starts a process: not in test-fast
async def test_sigterm_drains_every_child_and_a_dead_one_was_replaced(tmp_path: Path) -> None:
    # Slot 0 dies once (first start), then serves; every child records the SIGTERM it gets.
    script = (
        "import os, signal, sys, time\n"
        f"d = {str(tmp_path)!r}\n"
        "first = not os.path.exists(os.path.join(d, 'died'))\n"
        "if first and len(os.listdir(d)) == 0:\n"
        "    open(os.path.join(d, 'died'), 'w').close(); sys.exit(1)\n"
        "def bye(*_):\n"
        "    open(os.path.join(d, f'term-{os.getpid()}'), 'w').close(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "open(os.path.join(d, f'up-{os.getpid()}'), 'w').close()\n"
        "while True: time.sleep(0.05)\n"
    )
    pod = _pod(script)
    task = asyncio.create_task(pod.run())
    for _ in range(400):
        if len(list(tmp_path.glob("up-*"))) == 2:
            break
        await asyncio.sleep(0.05)
    up = {p.name[3:] for p in tmp_path.glob("up-*")}
    assert len(up) == 2 and (tmp_path / "died").exists()
    pod._stop.set()
    assert await task == 0
    assert {p.name[5:] for p in tmp_path.glob("term-*")} == up


def test_merge_labels_each_child_and_marks_a_silent_one() -> None:
    child = (
        "# HELP tether_queue_depth Queued runs\n# TYPE tether_queue_depth gauge\n"
        "tether_queue_depth 3.0\n"
        "# HELP tether_runs_started_total Runs\n# TYPE tether_runs_started_total counter\n"
        "tether_runs_started_total 5.0\n"
    )
    text = merge({0: child, 1: child.replace("3.0", "4.0"), 2: None}).decode()
    samples = {
        (s.name, s.labels.get("process")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("tether_queue_depth", "0")] == 3.0
    assert samples[("tether_queue_depth", "1")] == 4.0
    assert samples[("tether_runs_started_total", "1")] == 5.0
    assert samples[("tether_pod_process_up", "2")] == 0.0
    assert samples[("tether_pod_process_up", "0")] == 1.0
    assert text.count("# TYPE tether_queue_depth gauge") == 1
