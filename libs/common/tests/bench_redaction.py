"""Cost of masking one typical tool result (a few KB of log lines, ~5% with a secret).

Run: uv run --frozen python libs/common/tests/bench_redaction.py
Prints µs per `redact_value` call: cold (every string new: the cache never hits) and warm."""

from __future__ import annotations

import time

from tether_common import redaction

LINES = [
    "2026-12-01T04:00:{i:02d}Z INFO payment-api-{i} handled GET /v1/charges/{i} in {i}ms",
    "2026-12-01T04:00:{i:02d}Z WARN retry {i} of charge ch_{i}abc: upstream returned 503",
    "2026-12-01T04:00:{i:02d}Z ERROR could not connect to postgresql://app:pw{i}@db:5432/app",
    "2026-12-01T04:00:{i:02d}Z DEBUG worker {i} heartbeat ok, queue depth {i}",
]


def result(salt: int) -> dict[str, object]:
    lines = [
        LINES[i % 4 if i % 20 == 0 else i % 2 * 3].format(i=i) + f" #{salt}" for i in range(40)
    ]
    return {"instance": f"inst_{salt}", "lines": lines, "count": len(lines), "truncated": False}


def main() -> None:
    sample = result(0)
    size = len(str(sample))
    n = 300
    data = [result(s) for s in range(1, n + 1)]
    redaction._redact_cached.cache_clear()
    t = time.perf_counter()
    for d in data:
        redaction.redact_value(d)
    cold = (time.perf_counter() - t) / n * 1e6
    t = time.perf_counter()
    for d in data:
        redaction.redact_value(d)
    warm = (time.perf_counter() - t) / n * 1e6
    print(f"{size} B tool result: cold {cold:.0f} µs/call, warm (cached) {warm:.0f} µs/call")


if __name__ == "__main__":
    main()
