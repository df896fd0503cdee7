"""The fault suite's collector: each chaos test adds one row (its figures); the table is printed
at the end of the session and written to .tether/chaos-table.md."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tether_testkit import history

from chaos.kit import SCALE, Procs

COLUMNS = (
    "fault",
    "runs",
    "events checked",
    "lost",
    "duplicated",
    "double executions",
    "illegal transitions",
    "recovery",
)


@dataclass
class Row:
    fault: str
    runs: int
    events: int
    lost: int
    duplicated: int
    double_exec: int
    recovery: str
    illegal: int = 0

    def cells(self) -> list[str]:
        return [
            self.fault,
            str(self.runs),
            str(self.events),
            str(self.lost),
            str(self.duplicated),
            str(self.double_exec),
            str(self.illegal),
            self.recovery,
        ]


_ROWS: list[Row] = []


@pytest.fixture(scope="session")
def chaos_table() -> Callable[..., None]:
    """`chaos_table(fault, report=, recovery=)`: the figures from the history checker's report
    (tether_testkit.history); a count given beside it (a test's own check of something the
    checker does not see, e.g. a gRPC replay) shows when it is the larger. The older form
    `chaos_table(fault, runs=, events=, lost=, duplicated=, double_exec=, recovery=)` still
    works."""

    def add(fault: str, report: history.Report | None = None, **kw: Any) -> None:
        if report is not None:
            for name in ("runs", "events"):
                kw[name] = max(int(kw.get(name, 0)), getattr(report, name))
            for name in ("lost", "duplicated", "double_exec", "illegal"):
                kw[name] = max(int(kw.get(name, 0)), getattr(report, name))
            if report.violations:
                print(f"\n[chaos:{SCALE}] {fault}: checker violations:\n{report.explain()}")
        row = Row(
            fault=fault,
            runs=int(kw.get("runs", 0)),
            events=int(kw.get("events", 0)),
            lost=int(kw.get("lost", 0)),
            duplicated=int(kw.get("duplicated", 0)),
            double_exec=int(kw.get("double_exec", 0)),
            recovery=str(kw.get("recovery", "-")),
            illegal=int(kw.get("illegal", 0)),
        )
        _ROWS.append(row)
        print(
            f"\n[chaos:{SCALE}] "
            + " | ".join(f"{c}: {v}" for c, v in zip(COLUMNS, row.cells(), strict=True))
        )

    return add


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.cleanup()


def render() -> str:
    widths = [len(c) for c in COLUMNS]
    for row in _ROWS:
        widths = [max(w, len(c)) for w, c in zip(widths, row.cells(), strict=True)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(COLUMNS), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r.cells()) for r in _ROWS]
    return "\n".join(out)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """A fault marked `chaos_full` runs only at the full scale (`make chaos`); at the fast scale
    (`make test`) it is deselected, so no test of the suite shows as skipped."""
    if SCALE == "full":
        return
    dropped = [item for item in items if item.get_closest_marker("chaos_full")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("chaos_full")]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _ROWS:
        return
    table = render()
    terminalreporter.section(f"chaos table (TETHER_CHAOS_SCALE={SCALE})")
    terminalreporter.write_line(table)
    root = Path(str(terminalreporter.config.rootpath))
    out = root / ".tether" / "chaos-table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# Chaos table (TETHER_CHAOS_SCALE={SCALE})\n\n{table}\n")
    terminalreporter.write_line(f"written to {os.path.relpath(out)}")
