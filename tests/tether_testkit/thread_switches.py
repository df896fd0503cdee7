"""Context switches of a process's threads, as Linux counts them (`/proc/<pid>/task/*/status`):
each time a thread blocks or is woken. psutil's figure is the main thread's alone."""

from __future__ import annotations

import contextlib
from pathlib import Path


def context_switches(pid: int, thread_name: str | None = None) -> int:
    """Voluntary and involuntary switches so far of every thread of `pid` (or of those whose
    name, /proc's `comm`, is `thread_name`); threads that end meanwhile are skipped."""
    total = 0
    with contextlib.suppress(FileNotFoundError):  # the process itself is gone
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                if thread_name is not None and (task / "comm").read_text().strip() != thread_name:
                    continue
                for line in (task / "status").read_text().splitlines():
                    if "ctxt_switches:" in line:  # voluntary_ and nonvoluntary_
                        total += int(line.split(":", 1)[1])
    return total
