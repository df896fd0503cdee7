"""The fault suite's collector: each chaos test adds one row (its figures); the table is printed
at the end of the session and written to .tether/chaos-table.md."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos.kit import SCALE, Procs

COLUMNS = ("fault", "runs", "events checked", "lost", "duplicated", "double executions", "recovery")


@dataclass
class Row:
    fault: str
    runs: int
    events: int
    lost: int
    duplicated: int
    double_exec: int
    recovery: str

    def cells(self) -> list[str]:
        return [
            self.fault,
            str(self.runs),
            str(self.events),
            str(self.lost),
            str(self.duplicated),
            str(self.double_exec),
            self.recovery,
        ]


_ROWS: list[Row] = []


@pytest.fixture(scope="session")
def chaos_table() -> Callable[..., None]:
    """`chaos_table(fault, runs=, events=, lost=, duplicated=, double_exec=, recovery=)`."""

    def add(fault: str, **kw: Any) -> None:
        row = Row(
            fault=fault,
            runs=int(kw.get("runs", 0)),
            events=int(kw.get("events", 0)),
            lost=int(kw.get("lost", 0)),
            duplicated=int(kw.get("duplicated", 0)),
            double_exec=int(kw.get("double_exec", 0)),
            recovery=str(kw.get("recovery", "-")),
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
