"""Percentiles and medians, plus the median of several repetitions' result documents."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def p50_p99(values: Sequence[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 3), "p99": round(percentile(values, 99), 3)}


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def median_of(docs: Sequence[Any]) -> Any:
    """Leaf-wise median of equally shaped documents (numbers); other leaves come from the first."""
    first = docs[0]
    if isinstance(first, dict):
        return {k: median_of([d[k] for d in docs if isinstance(d, dict) and k in d]) for k in first}
    if _is_number(first):
        nums = [float(d) for d in docs if _is_number(d) and not math.isnan(float(d))]
        if not nums:
            return math.nan
        m = statistics.median(nums)
        return int(m) if all(isinstance(d, int) for d in docs) and m == int(m) else round(m, 3)
    return first


def numeric_leaves(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested dict keyed by its dotted path (for checks and for printing)."""
    if isinstance(doc, dict):
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(numeric_leaves(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: doc}
