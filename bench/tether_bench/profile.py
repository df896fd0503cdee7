"""Summaries of py-spy `--format raw` (collapsed stacks) profiles: where the CPU went, by leaf
function (self), by function anywhere on the stack (inclusive), and by library area.

`python -m tether_bench.profile FILE...` prints the summary of each file."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")

AREAS = [
    ("asyncpg", "asyncpg (Postgres client)"),
    ("grpc", "grpc (aio + C core glue)"),
    ("redis", "redis-py"),
    ("aiohttp", "aiohttp"),
    ("multidict", "aiohttp"),
    ("yarl", "aiohttp"),
    ("google/protobuf", "protobuf"),
    ("json/", "json"),
    ("logging", "logging"),
    ("pythonjsonlogger", "logging"),
    ("prometheus_client", "prometheus_client"),
    ("opentelemetry", "opentelemetry"),
    ("uvloop", "event loop"),
    ("asyncio/", "event loop"),
    ("selectors", "event loop"),
    ("tether_runtime", "tether_runtime"),
    ("tether_gateway", "tether_gateway"),
    ("tether_common", "tether_common"),
    ("tether/runtime", "generated protobuf"),
]


def _split(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip(), ""
    return m.group("func"), m.group("file")


def area_of(file: str) -> str:
    for needle, name in AREAS:
        if needle in file:
            return name
    return "other" if file else "native/unknown"


def _short(file: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def summarize(path: Path, top: int = 20) -> dict[str, Any]:
    self_counts: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_split(f) for f in stack.split(";")]
        frames = [f for f in frames if f[1]] or frames  # drop the process/thread labels
        func, file = frames[-1]
        self_counts[f"{func} ({_short(file)})"] += n
        areas[area_of(file)] += n
        for name in {f"{fn} ({_short(fl)})" for fn, fl in frames}:
            incl[name] += n
    pct = (lambda c: round(100 * c / total, 1)) if total else (lambda c: 0.0)
    return {
        "file": str(path),
        "samples": total,
        "areas_pct": {k: pct(v) for k, v in areas.most_common()},
        "self_pct": {k: pct(v) for k, v in self_counts.most_common(top)},
        "inclusive_pct": {k: pct(v) for k, v in incl.most_common(top)},
    }


def render(summary: dict[str, Any]) -> str:
    lines = [f"== {summary['file']}: {summary['samples']} samples"]
    for title in ("areas_pct", "self_pct", "inclusive_pct"):
        lines.append(f"-- {title}")
        lines += [f"  {v:5.1f}%  {k}" for k, v in summary[title].items()]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    for name in argv:
        print(render(summarize(Path(name))))


if __name__ == "__main__":
    main(sys.argv[1:])
