"""Masks secrets (tokens, keys, connection strings, passwords) before text leaves the process."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # URLs with credentials: postgresql://user:pass@host/db, redis://:pass@host
    (re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s:/@]*:[^\s@/]+@", re.I), r"\1***:***@"),
    # Any database / cache URL at all reveals topology: keep the scheme only.
    (re.compile(r"\b(postgres(?:ql)?|redis|rediss|mysql|mongodb)://[^\s'\"]+", re.I), r"\1://***"),
    # Bearer tokens and JWTs.
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]+", re.I), "Bearer ***"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), "***jwt***"),
    # Provider-style API keys: sk-..., ghp_..., xoxb-..., AKIA...
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{12,}"), "***key***"),
    (re.compile(r"\b(ghp|gho|ghs|github_pat|xox[abp])_?[A-Za-z0-9_-]{12,}"), "***key***"),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "***key***"),
    # key=value / "key": "value" for secret-looking keys.
    (
        re.compile(
            r"(?i)\b(password|passwd|secret|api[_-]?key|token|access[_-]?key|private[_-]?key)"
            r"(\"?\s*[:=]\s*\"?)([^\s\"',;]+)"
        ),
        r"\1\2***",
    ),
]

_SECRET_KEYS = re.compile(r"(?i)(password|passwd|secret|token|api[_-]?key|authorization|dsn|_url$)")


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by a mask."""
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text


def redact_value(key: str, value: Any) -> Any:
    """Mask a setting or field by its name, and any secret inside its text."""
    if value is None or value == "":
        return value
    if _SECRET_KEYS.search(key):
        return "***"
    if isinstance(value, str):
        return redact(value)
    return value


def redact_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: redact_value(k, v) for k, v in values.items()}
