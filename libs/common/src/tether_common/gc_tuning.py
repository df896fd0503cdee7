"""Garbage collection for a long-running server process.

A full (generation 2) collection walks every container object the process holds. Most of them
were made at start-up (modules, protobuf descriptors, gRPC and asyncpg machinery) and live as
long as the process, so every full collection walks them again for nothing: on the bench's
2-core machine a runtime's full collection paused its event loop for 70-110 ms in the middle of
a 200-run fan-out, stalling every stream at once. `freeze` moves them out of the collector's
view (CPython's gc.freeze, as large Python services do after start-up).

The thresholds: CPython's (700, 10, 10) start a young collection every 700 net allocations of
container objects, and every tenth of them also walks the middle generation. A short run
allocates a few hundred such objects that outlive their statement (rows, events, futures), so
the runtime collected about once in five runs, and each tenth collection walked the middle
generation too: 0.33-0.37 s of its 10-11 s of CPU over `make bench`'s 3,000 short runs (3.4 %),
the gateway 0.085 of 5 s. With a young generation of 5,000, collections come 14x less often:
0.10-0.11 and 0.004 s (issue #34, bench/README.md). Cycles are still found within 5,000 allocations of their making;
the older generations keep CPython's ratios to the young one (a full collection also waits for
a quarter of the long-lived objects to be new, as in CPython)."""

from __future__ import annotations

import gc

THRESHOLDS = (5000, 10, 10)
"""gc.set_threshold's (young, middle, old): see the module's note."""


def freeze_startup_objects() -> None:
    """Call once the process serves: collect start-up garbage, freeze what remains, and set the
    serving thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
