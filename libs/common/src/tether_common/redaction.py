"""Masks secrets (tokens, keys, passwords, private keys) before text leaves the process.

Detection is Yelp's `detect-secrets` plugins (maintained, reviewed formats: AWS, GitHub, Stripe,
Slack, private keys, basic-auth URLs, JWTs, secret-named keywords), run on each string; Tether
adds a short explicit list only where detect-secrets has no rule (connection strings, bearer and
basic authorization headers, `*_TOKEN=` / `access_key=` assignments, `sk-` keys, whole PEM
blocks). Only the secret part is masked where it can be told apart (`db_password=***`).

`redact_value` walks parsed structures (dicts, lists) and masks their strings, keys kept; JSON is
never masked as text and re-parsed, which could corrupt it (a `\\"` inside a value).

High-entropy string detectors are left out on purpose: run over free text they mask ids, trace
ids and hashes that a person needs to read, and every real format above has its own rule."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import (
    CONFIG_DENYLIST_REGEX_TO_GROUP,
    QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
)
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector

MASK = "***"

# -- Tether's own rules (where detect-secrets has none), applied first, in order -----------------
_PEM = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY"
    r"(?: BLOCK)?-----|\Z)",
    re.S,
)
_OWN: list[tuple[re.Pattern[str], str]] = [
    # URLs with credentials: postgresql://user:pass@host/db, redis://:pass@host
    (re.compile(r"\b([a-z][a-z0-9+.-]*://)[^\s:/@]*:[^\s@/]+@", re.I), r"\1***:***@"),
    # Any database / cache URL at all reveals topology: keep the scheme only.
    (re.compile(r"\b(postgres(?:ql)?|redis|rediss|mysql|mongodb)://[^\s'\"]+", re.I), r"\1://***"),
    # Authorization headers: Bearer tokens and Basic credentials.
    (re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]+", re.I), "Bearer ***"),
    (re.compile(r"\b(Basic)\s+[A-Za-z0-9+/]{8,}={0,2}", re.I), r"\1 ***"),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), "***jwt***"),
    # Provider-style API keys detect-secrets does not know in this shape: sk-..., xoxb-...
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{12,}"), "***key***"),
    (
        re.compile(r"\b(ghp|gho|ghu|ghs|ghr|github_pat|xox[abpors])[_-][A-Za-z0-9_-]{12,}"),
        "***key***",
    ),
    # Secret-named assignments the keyword plugin has no word for (token, access key, auth).
    (
        re.compile(
            r"(?i)\b(\w*(?:token|access[_-]?key|secret[_-]?key|credentials?|authorization)\w*)"
            r"(\"?\s*[:=]\s*\"?)(?!\*\*\*|(?:Basic|Bearer)\s)([^\s\"',;&]+)"
        ),
        r"\1\2***",
    ),
]

# -- detect-secrets plugins ----------------------------------------------------------------------
# The keyword plugin's own rules, as (regex, value group): `name: value` / `name=value` as in
# config files and logs, and the quoted forms of code (`password = "x"`).
_KEYWORD_RULES: tuple[tuple[re.Pattern[str], int], ...] = (
    *CONFIG_DENYLIST_REGEX_TO_GROUP.items(),
    *QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items(),
)
_PLUGINS: tuple[BasePlugin, ...] = (
    AWSKeyDetector(),
    GitHubTokenDetector(),
    StripeDetector(),
    SlackDetector(),
    BasicAuthDetector(),
    JwtTokenDetector(),
    OpenAIDetector(),
)
_PRIVATE_KEY = PrivateKeyDetector()

# Cheap pre-filter: a string with none of these (lower-cased) cannot hold anything the rules
# above find, so ordinary text costs a few substring scans in C (a regex alternation with
# IGNORECASE costs ~10x more).
_SUSPICIOUS = (
    "pass",
    "pwd",
    "secret",
    "key",
    "token",
    "auth",
    "bearer",
    "basic",
    "credential",
    "contrase",
    "://",
    "-----begin",
    "putty",
    "eyj",
    "a3t",
    "abia",
    "acca",
    "akia",
    "asia",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat",
    "_live_",
    "sk-",
    "pk-",
    "rk-",
    "xox",
    "hooks.slack",
)


def _suspicious(text: str) -> bool:
    low = text.lower()
    return any(word in low for word in _SUSPICIOUS)


# A keyword plugin's value runs to the end of the line; the secret ends at the first separator.
_VALUE_END = re.compile(r"[\s,;&]")
_CACHE_MAX_LEN = 4096


def _mask_found(line: str, found: Iterable[str]) -> str:
    for secret in sorted(set(found), key=len, reverse=True):
        if not secret or secret.strip("*") == "":
            continue
        edge = r"(?<![A-Za-z0-9_])" + re.escape(secret) + r"(?![A-Za-z0-9_])"
        line = re.sub(edge, MASK, line)
    return line


def _keyword_spans(line: str) -> list[tuple[int, int]]:
    """Where detect-secrets' keyword rules (`password=`, `client_secret:`, `db_pass = "..."`) see
    a value, cut at its first separator; a "value" that is itself a `name:` is skipped so the
    search goes on to the real one (`client_secret: client_secret: x` masks `x`)."""
    spans: list[tuple[int, int]] = []
    for regex, group in _KEYWORD_RULES:
        pos = 0
        while (m := regex.search(line, pos)) is not None:
            start, end = m.span(group)
            cut = _VALUE_END.search(line, start, end)
            stop = cut.start() if cut else end
            value = line[start:stop]
            if value[-1:] in (":", "="):  # another name: look for its value from here
                pos = max(start, m.start() + 1)
                continue
            if value.strip("*"):
                spans.append((start, stop))
            pos = max(stop, m.start() + 1)
    return spans


def _mask_spans(line: str, spans: list[tuple[int, int]]) -> str:
    out, last = [], 0
    for start, stop in sorted(spans):
        if start < last:  # overlapping finds: the first already covers it
            start = last
        if stop <= start:
            continue
        out.append(line[last:start])
        out.append(MASK)
        last = stop
    out.append(line[last:])
    return "".join(out)


def _detect_line(line: str) -> str:
    spans = _keyword_spans(line)
    if spans:
        line = _mask_spans(line, spans)
    found: list[str] = []
    for plugin in _PLUGINS:
        found.extend(plugin.analyze_string(line))
    return _mask_found(line, found) if found else line


def _pem_mask(m: re.Match[str]) -> str:
    # The END line is written back even when the block was cut short, so masking twice (a card
    # field, then the whole card) gives the same text and never swallows what follows.
    return f"-----BEGIN {m.group(1)}-----{MASK}-----END {m.group(1)}-----"


def _redact(text: str) -> str:
    if not _suspicious(text):
        return text
    if any(True for _ in _PRIVATE_KEY.analyze_string(text)):
        text = _PEM.sub(_pem_mask, text)
    for pattern, repl in _OWN:
        text = pattern.sub(repl, text)
    if not _suspicious(text):
        return text
    return "".join(_detect_line(line) for line in text.splitlines(keepends=True))


_redact_cached = lru_cache(maxsize=4096)(_redact)


def redact(text: str) -> str:
    """Return `text` with every recognised secret replaced by a mask (deterministic)."""
    if len(text) <= _CACHE_MAX_LEN:
        return _redact_cached(text)
    return _redact(text)


# Field names whose whole string value is a secret, whatever it looks like.
_SECRET_FIELD = re.compile(
    r"(?i)(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"authorization|credential|dsn|cookie)"
)


def redact_value(obj: Any) -> Any:
    """Mask every string inside a parsed structure (dicts, lists, tuples, nested); keys are kept,
    a string under a secret-named key is masked whole. Never serializes: the shape and every
    non-string value come back as they were."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if (
                isinstance(key, str)
                and isinstance(value, str)
                and value
                and _SECRET_FIELD.search(key)
            ):
                out[key] = MASK
            else:
                out[key] = redact_value(value)
        return out
    if isinstance(obj, list):
        return [redact_value(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_value(v) for v in obj)
    return obj


# -- settings ------------------------------------------------------------------------------------
_SECRET_SETTING = re.compile(
    r"(?i)(password|passwd|secret|token|api[_-]?key|authorization|dsn|_url$)"
)


def _redact_setting(key: str, value: Any) -> Any:
    """Mask a setting by its name, and any secret inside its text."""
    if value is None or value == "":
        return value
    if _SECRET_SETTING.search(key):
        return MASK
    if isinstance(value, str):
        return redact(value)
    return value


def redact_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A settings view for logs and `/v1/config`: secret-named settings masked whole."""
    return {k: _redact_setting(k, v) for k, v in values.items()}
