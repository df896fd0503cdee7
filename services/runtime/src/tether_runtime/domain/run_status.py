"""The run's status machine: which status may follow which, each edge named by the store function
that makes it (store/runs.py; store/run_admission.py for `waiting`). The store's
statements are the machine; this table is its one written form, read by the history checker of
the fault and soak suites (tests/tether_testkit/history.py); a runtime test checks that every
status the store writes is one of these."""

from __future__ import annotations

from collections.abc import Mapping

from tether_proto.wire import RUN_STATUS, TERMINAL_RUN_STATUSES

STATUSES = frozenset(n for n in RUN_STATUS.values if n != "unspecified")
TERMINAL = TERMINAL_RUN_STATUSES

# (from, to) -> the store function that makes the move.
TRANSITIONS: Mapping[tuple[str, str], str] = {
    ("waiting", "queued"): "run_admission: run_promote_waiting (the earlier runs ended)",
    ("waiting", "cancelled"): "runs.mark_cancelled",
    ("queued", "running"): "runs.claim_batch",
    ("queued", "cancelled"): "runs.mark_cancelled",
    ("running", "running"): "runs.claim_batch (takeover of an expired lease)",
    ("running", "queued"): "runs.release (graceful shutdown)",
    ("running", "interrupted"): "runs.finish / runs.hold",
    ("running", "completed"): "runs.finish",
    ("running", "failed"): "runs.finish (also poison.py)",
    ("running", "cancelled"): "runs.finish",
    ("interrupted", "queued"): "runs.requeue (a decision)",
    ("interrupted", "running"): "runs.unhold (a held question answered)",
    ("interrupted", "cancelled"): "runs.mark_cancelled",
}

# A new run starts in one of these (runs.create: queued; concurrent_runs.enqueue: waiting).
INITIAL = frozenset({"queued", "waiting"})


def reachable(src: str, dst: str) -> bool:
    """Whether `dst` can follow `src` through zero or more moves: what an observer who polls (and
    so may miss moves in between) is allowed to see next."""
    if src == dst:
        return True
    seen = {src}
    todo = [src]
    while todo:
        at = todo.pop()
        for a, b in TRANSITIONS:
            if a == at and b not in seen:
                if b == dst:
                    return True
                seen.add(b)
                todo.append(b)
    return False
