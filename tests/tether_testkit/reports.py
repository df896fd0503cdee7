"""Side-by-side figures a test measures but does not assert (e.g. what LangGraph's own server does
under the script Tether's guarantees are asserted with): each test writes a small table as JSON
into .tether/test-reports/ (ignored by git), and the session's terminal summary prints the tables
written during the session (the root conftest.py), also from xdist workers, whose own output is
not shown."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

REPORT_DIR = Path(__file__).resolve().parents[2] / ".tether" / "test-reports"


def write(name: str, title: str, columns: list[str], rows: list[list[Any]]) -> Path:
    """Write the table `name` (a file name): rows of [label, value per column]."""
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    path = REPORT_DIR / f"{name}.json"
    doc = {"title": title, "columns": columns, "rows": rows, "time": time.time()}
    path.write_text(json.dumps(doc, indent=2, default=str))
    return path


def render(doc: dict[str, Any]) -> list[str]:
    """The table as aligned text lines."""
    header = ["", *doc["columns"]]
    rows = [[str(c) for c in row] for row in doc["rows"]]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def since(start: float) -> list[dict[str, Any]]:
    """The tables written since `start` (a time.time())."""
    if not REPORT_DIR.is_dir():
        return []
    out = []
    for path in sorted(REPORT_DIR.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("time", 0) >= start:
            out.append(doc)
    return out
