"""The run status machine (tether_runtime.domain.run_status) stays the store's: every status the
store's statements write or move from is one of the machine's, every move the table names is made
by a statement that exists, and nothing leaves a terminal status."""

from __future__ import annotations

import re
from pathlib import Path

from tether_runtime.domain import run_status
from tether_runtime.store import run_admission, runs

STORE = Path(runs.__file__).read_text() + Path(run_admission.__file__).read_text()


def test_every_status_the_store_writes_is_one_of_the_machines() -> None:
    written = set(re.findall(r"SET status = '(\w+)'", STORE))
    read = set(re.findall(r"\bstatus = '(\w+)'", STORE))
    assert written and read
    assert written <= run_status.STATUSES
    assert read <= run_status.STATUSES
    targets = {b for _, b in run_status.TRANSITIONS}
    assert written <= targets


def test_each_named_store_function_exists() -> None:
    for how in run_status.TRANSITIONS.values():
        for name in re.findall(r"runs\.(\w+)", how):
            assert callable(getattr(runs, name)), how


def test_nothing_leaves_a_terminal_status() -> None:
    assert run_status.TERMINAL <= run_status.STATUSES
    for a, _ in run_status.TRANSITIONS:
        assert a not in run_status.TERMINAL
    for t in run_status.TERMINAL:
        assert not any(run_status.reachable(t, s) for s in run_status.STATUSES - {t})
    assert run_status.reachable("queued", "completed")
    assert run_status.reachable("interrupted", "running")
    assert not run_status.reachable("completed", "running")
