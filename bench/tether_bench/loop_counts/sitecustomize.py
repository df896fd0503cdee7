"""`make bench ARGS=--loop-counts`: counts every timer and task the event loop of each process
under test arms or creates (imported by Python at start-up from this folder, which the bench puts
on the processes' PYTHONPATH only with that flag).

asyncio's loop, not uvloop's: uvloop arms its timers in C, out of reach; the flag runs the system
on asyncio's loop (TETHER_UVLOOP=off), where `call_later`, `asyncio.timeout`, `asyncio.sleep`
and `wait_for` all arm theirs through `call_at`, and every task is made by `create_task`. The
counts are the application's, the same on either loop; the CPU figures of such a run are not
uvloop's and are not comparable with a run without the flag.

The totals are written to TETHER_BENCH_LOOP_COUNTS_DIR/<pid>.json every 50 ms by a thread (the
bench reads them before and after each scenario, ScenarioCpu). With TETHER_BENCH_LOOP_COUNTS_SITES
set, each is also counted by where it was made (the first three frames outside asyncio): dearer,
for finding the next timer to remove."""

from __future__ import annotations

import asyncio.base_events
import collections
import json
import os
import sys
import threading
from typing import Any

_DIR = os.environ.get("TETHER_BENCH_LOOP_COUNTS_DIR", "")
_SITES = bool(os.environ.get("TETHER_BENCH_LOOP_COUNTS_SITES"))
_ASYNCIO = os.path.dirname(asyncio.base_events.__file__) + os.sep


def _install() -> None:
    counts = {"timers": 0, "tasks": 0}
    sites: dict[str, collections.Counter[str]] = {
        "timers": collections.Counter(),
        "tasks": collections.Counter(),
    }
    loop_class: Any = asyncio.base_events.BaseEventLoop
    call_at, create_task = loop_class.call_at, loop_class.create_task

    def site(kind: str) -> None:
        frame, where = sys._getframe(2), []
        while frame is not None and len(where) < 3:
            name = frame.f_code.co_filename
            if not name.startswith(_ASYNCIO) and "contextlib" not in name:
                where.append(f"{name.rsplit('site-packages/', 1)[-1]}:{frame.f_lineno}")
            frame = frame.f_back
        sites[kind][" < ".join(where)] += 1

    def counting_call_at(self: Any, when: float, callback: Any, *args: Any, **kw: Any) -> Any:
        counts["timers"] += 1
        if _SITES:
            site("timers")
        return call_at(self, when, callback, *args, **kw)

    def counting_create_task(self: Any, coro: Any, *args: Any, **kw: Any) -> Any:
        counts["tasks"] += 1
        if _SITES:
            site("tasks")
        return create_task(self, coro, *args, **kw)

    loop_class.call_at = counting_call_at
    loop_class.create_task = counting_create_task
    path = os.path.join(_DIR, f"{os.getpid()}.json")

    def write_forever() -> None:
        tick = threading.Event()  # never set: a sleep of this thread alone
        while True:
            tick.wait(0.05)
            document: dict[str, Any] = dict(counts)
            if _SITES:
                document.update({f"{k}_by_site": v.most_common(30) for k, v in sites.items()})
            with open(path + ".tmp", "w") as f:
                json.dump(document, f)
            os.replace(path + ".tmp", path)

    threading.Thread(target=write_forever, name="loop-counts", daemon=True).start()


if _DIR:
    _install()
