"""Histories and their checker, as Jepsen's are: every chaos, partition and soak client records what
it did and what it saw (a `History`: runs started, decisions sent with their keys, events received,
streams re-attached with Last-Event-ID, write effects counted by the tool's own counter, statuses
read), and one `check` reads all the histories of a fault beside the Postgres log (the `Truth`)
and verifies each run's invariants:

- the stored log is dense (1..N), with one terminal event, the last: nothing after `done`;
- every client's view of a run is the log: nothing lost (within what it followed), nothing
  received twice, nothing the log does not hold, no event after the terminal one;
- each interrupt is resolved at most once in the log, and a decision the runtime accepted is the
  one the log shows;
- each write effect happened at most once (the effect counter: the inventory's operations);
- the statuses observed follow the runtime's own status machine (tether_runtime.domain.run_status;
  a poller may miss moves, so each next status must be reachable from the one before), and the
  final status matches the log's terminal event.

The `Report` counts runs, events, lost, duplicated, double executions and illegal transitions:
the figures of the chaos table and the soak's verdict."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.runtime.v1 import events_pb2
from tether_common.event_json import TERMINAL_TYPES, event_type
from tether_runtime.domain import run_status

# What each terminal event leaves the run's status as.
_END_STATUS = {"done": "completed", "error": "failed", "cancelled": "cancelled"}
# Kinds of ops a history holds.
OPS = ("start", "decision", "event", "attach", "effect", "status")


@dataclass(frozen=True)
class Op:
    at: float
    client: str
    kind: str  # one of OPS
    run_id: str
    data: Mapping[str, Any]


class History:
    """One client's record (thread- and task-safe appends). A client that follows one run's
    stream calls `attach` at each (re)connection, then `event` per event; sequences received
    between two `attach` calls belong to one connection."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, run_id: str, **data: Any) -> None:
        with self._lock:
            self.ops.append(Op(time.time(), self.client, kind, run_id, data))

    def start(self, run_id: str, key: str = "") -> None:
        self._add("start", run_id, key=key)

    def decision(
        self, run_id: str, interrupt_id: str, key: str, decision: str = "approve", *, outcome: str
    ) -> None:
        """A resume sent: `outcome` "accepted" (202 / OK), "resolved" (already decided: 409 /
        INTERRUPT_ALREADY_RESOLVED) or "error" (no answer, unknown)."""
        self._add(
            "decision", run_id, interrupt_id=interrupt_id, key=key, decision=decision,
            outcome=outcome,
        )  # fmt: skip

    def attach(self, run_id: str, last_event_id: int = 0) -> None:
        self._add("attach", run_id, last_event_id=last_event_id)

    def event(self, run_id: str, seq: int, etype: str, interrupt_id: str = "") -> None:
        self._add("event", run_id, seq=seq, type=etype, interrupt_id=interrupt_id)

    def replay(self, run_id: str, evs: Iterable[events_pb2.RunEvent], after: int = 0) -> None:
        """A whole read of a run's events (e.g. gRPC StreamRunEvents from `after`): one attach,
        then each event."""
        self.attach(run_id, after)
        for e in evs:
            self.event(run_id, e.sequence, event_type(e))

    def effect(self, run_id: str, target: str, count: int) -> None:
        """The tool's own effect counter read for `target` (how many times it really happened)."""
        self._add("effect", run_id, target=target, count=count)

    def status(self, run_id: str, status: str) -> None:
        self._add("status", run_id, status=status)

    def runs(self) -> set[str]:
        return {op.run_id for op in self.ops}


@dataclass
class Truth:
    """The ground truth of the runs checked: their stored logs and final statuses (Postgres)."""

    logs: dict[str, list[events_pb2.RunEvent]] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)

    @classmethod
    async def read(cls, conn: Any, run_ids: Iterable[str]) -> Truth:
        """From an asyncpg connection or pool."""
        ids = sorted(set(run_ids))
        truth = cls()
        rows = await conn.fetch(
            "SELECT run_id, data FROM run_event WHERE run_id = ANY($1::text[]) "
            "ORDER BY run_id, sequence",
            ids,
        )
        for run_id in ids:
            truth.logs[run_id] = []
        for r in rows:
            truth.logs[r["run_id"]].append(events_pb2.RunEvent.FromString(bytes(r["data"])))
        for r in await conn.fetch("SELECT id, status FROM run WHERE id = ANY($1::text[])", ids):
            truth.statuses[r["id"]] = r["status"]
        return truth


@dataclass(frozen=True)
class Violation:
    run_id: str
    kind: str  # gap, duplicate, after_terminal, lost, phantom, decision_twice, double_effect, ...
    detail: str

    def __str__(self) -> str:
        return f"{self.run_id}: {self.kind}: {self.detail}"


# Which count of the report each violation adds to.
_COUNTS = {
    "gap": "lost",
    "lost": "lost",
    "duplicate": "duplicated",
    "phantom": "duplicated",
    "after_terminal": "duplicated",
    "decision_twice": "double_exec",
    "double_effect": "double_exec",
    "illegal_transition": "illegal",
}


@dataclass
class Report:
    runs: int = 0
    events: int = 0
    lost: int = 0
    duplicated: int = 0
    double_exec: int = 0
    illegal: int = 0
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, run_id: str, kind: str, detail: str, n: int = 1) -> None:
        self.violations.append(Violation(run_id, kind, detail))
        counter = _COUNTS.get(kind)
        if counter:
            setattr(self, counter, getattr(self, counter) + n)

    def kinds(self) -> Counter[str]:
        return Counter(v.kind for v in self.violations)

    def summary(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "events": self.events,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "double_exec": self.double_exec,
            "illegal_transitions": self.illegal,
            "violations": len(self.violations),
            "first": [str(v) for v in self.violations[:10]],
        }

    def explain(self, limit: int = 20) -> str:
        return "\n".join(str(v) for v in self.violations[:limit])


def check(histories: Iterable[History], truth: Truth, *, require_end: bool = True) -> Report:
    """Every run any history or the truth names, checked. `require_end`: each run must have
    reached a terminal status (a fault test's runs all must; a soak's last ones may not have)."""
    by_run: dict[str, list[Op]] = defaultdict(list)
    for h in histories:
        for op in h.ops:
            by_run[op.run_id].append(op)
    report = Report()
    for run_id in sorted(set(by_run) | set(truth.logs)):
        ops = sorted(by_run.get(run_id, []), key=lambda o: o.at)
        log = truth.logs.get(run_id, [])
        report.runs += 1
        report.events += len(log)
        _check_log(report, run_id, log, truth.statuses.get(run_id), require_end)
        _check_views(report, run_id, ops, log)
        _check_decisions(report, run_id, ops, log)
        _check_effects(report, run_id, ops)
        _check_statuses(report, run_id, ops, log, truth.statuses.get(run_id))
    return report


def log_faults(log: list[events_pb2.RunEvent]) -> tuple[int, int]:
    """(missing, duplicated) sequences of a stored log, which must be exactly 1..N."""
    seqs = [e.sequence for e in log]
    dups = len(seqs) - len(set(seqs))
    gaps = (max(seqs) - len(set(seqs))) if seqs else 0
    return gaps, dups


def view_faults(got: Iterable[int], truth: Iterable[int]) -> tuple[int, int]:
    """(lost, duplicated) of a client's sequences against the stored ones."""
    seen: set[int] = set()
    dup = 0
    for s in got:
        if s in seen:
            dup += 1
        seen.add(s)
    return len(set(truth) - seen), dup


def _check_log(
    report: Report,
    run_id: str,
    log: list[events_pb2.RunEvent],
    status: str | None,
    require_end: bool,
) -> None:
    gaps, dups = log_faults(log)
    if gaps:
        report.add(run_id, "gap", f"{gaps} sequence(s) missing from the stored log", gaps)
    if dups:
        report.add(run_id, "duplicate", f"{dups} sequence(s) stored twice", dups)
    terminals = [i for i, e in enumerate(log) if event_type(e) in TERMINAL_TYPES]
    if terminals and terminals[0] != len(log) - 1:
        after = len(log) - 1 - terminals[0]
        report.add(run_id, "after_terminal", f"{after} event(s) stored after the terminal", after)
    if require_end and (status is None or status not in run_status.TERMINAL):
        report.add(run_id, "unfinished", f"status {status!r} at the end")
    if status in run_status.TERMINAL and not terminals:
        report.add(run_id, "no_terminal_event", f"status {status} but no terminal event")
    if terminals and status is not None:
        want = _END_STATUS.get(event_type(log[terminals[0]]))
        if want and status != want:
            report.add(
                run_id,
                "illegal_transition",
                f"log ends in {event_type(log[terminals[0]])} but status is {status}",
            )


def _check_views(
    report: Report, run_id: str, ops: list[Op], log: list[events_pb2.RunEvent]
) -> None:
    stored = {e.sequence: event_type(e) for e in log}
    end = max((e.sequence for e in log if event_type(e) in TERMINAL_TYPES), default=None)
    by_client: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind in ("attach", "event"):
            by_client[op.client].append(op)
    for client, cops in by_client.items():
        start: int | None = None  # the Last-Event-ID of the client's first attach
        last = 0  # the last sequence it received
        seen: list[int] = []
        for op in cops:
            if op.kind == "attach":
                lei = int(op.data["last_event_id"])
                if start is None:
                    start = lei
                elif lei != last:
                    report.add(
                        run_id, "lost" if lei > last else "duplicate",
                        f"{client} re-attached from {lei} after receiving up to {last}",
                    )  # fmt: skip
                continue
            seq, etype = int(op.data["seq"]), str(op.data["type"])
            if start is None:
                start = 0
            if seq in seen:
                report.add(run_id, "duplicate", f"{client} received {seq} twice")
                continue
            if end is not None and seq > end:
                report.add(run_id, "after_terminal", f"{client} received {seq} after the end")
            elif stored.get(seq) != etype:
                report.add(
                    run_id,
                    "phantom",
                    f"{client} received {seq} {etype}, the log holds {stored.get(seq)}",
                )
            if seq < last:
                report.add(run_id, "out_of_order", f"{client} received {seq} after {last}")
            seen.append(seq)
            last = max(last, seq)
        if start is None:
            continue
        # What the client followed: from its first Last-Event-ID to what it last received (to the
        # end when it received the terminal event).
        upto = end if end is not None and last >= end else last
        want = [s for s in stored if start < s <= upto]
        lost, _ = view_faults(seen, want)
        if lost:
            report.add(run_id, "lost", f"{client} missed {lost} of {start + 1}..{upto}", lost)


def _check_decisions(
    report: Report, run_id: str, ops: list[Op], log: list[events_pb2.RunEvent]
) -> None:
    resolved = Counter(
        e.interrupt_resolved.interrupt_id for e in log if event_type(e) == "interrupt_resolved"
    )
    raised = {e.interrupt.interrupt_id for e in log if event_type(e) == "interrupt"}
    for iid, n in resolved.items():
        if n > 1:
            report.add(run_id, "decision_twice", f"interrupt {iid} resolved {n} times", n - 1)
        if iid not in raised:
            report.add(run_id, "phantom", f"interrupt {iid} resolved, never raised")
    for op in ops:
        if op.kind == "decision" and op.data["outcome"] == "accepted":
            if resolved[str(op.data["interrupt_id"])] == 0:
                report.add(
                    run_id,
                    "decision_lost",
                    f"decision {op.data['key']} on {op.data['interrupt_id']} accepted, never applied",
                )


def _check_effects(report: Report, run_id: str, ops: list[Op]) -> None:
    most: dict[str, int] = {}
    for op in ops:
        if op.kind == "effect":
            target = str(op.data["target"])
            most[target] = max(most.get(target, 0), int(op.data["count"]))
    for target, n in most.items():
        if n > 1:
            report.add(run_id, "double_effect", f"{target} happened {n} times", n - 1)


def _check_statuses(
    report: Report, run_id: str, ops: list[Op], log: list[events_pb2.RunEvent], final: str | None
) -> None:
    seen = [str(op.data["status"]) for op in ops if op.kind == "status"]
    if final is not None:
        seen.append(final)
    for s in seen:
        if s not in run_status.STATUSES:
            report.add(run_id, "illegal_transition", f"unknown status {s!r}")
            return
    if seen and not any(
        seen[0] == i or run_status.reachable(i, seen[0]) for i in run_status.INITIAL
    ):
        report.add(run_id, "illegal_transition", f"first status {seen[0]} unreachable")
    for a, b in zip(seen, seen[1:], strict=False):
        if not run_status.reachable(a, b):
            report.add(run_id, "illegal_transition", f"{a} -> {b}")
