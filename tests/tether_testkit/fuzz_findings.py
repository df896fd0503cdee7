"""The fuzzers' known findings (#35) still open, in one list: an input matching one may get a
server error without failing the fuzz run, and each finding's reproducer is an
xfail(strict=True) test (test_sec_fuzz_findings.py), so the day its fix lands the reproducer
passes, fails as XPASS, and the finding is deleted here."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message

# google.protobuf.Timestamp's range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z.
MIN_SECONDS, MAX_SECONDS = -62_135_596_800, 253_402_300_799
DEEP = 500  # nesting the JSON parser cannot take (it recurses)


@dataclass(frozen=True)
class GrpcFinding:
    title: str  # "#35 finding N: ..."
    matches: Callable[[Message], bool]


def _timestamp_out_of_range(request: Message) -> bool:
    for field, value in request.ListFields():
        if field.message_type is not None and field.message_type.full_name.endswith("Timestamp"):
            seconds, nanos = value.seconds, value.nanos  # type: ignore[attr-defined]
            if not (MIN_SECONDS <= seconds <= MAX_SECONDS and 0 <= nanos < 10**9):
                return True
    return False


def nesting(raw: bytes) -> int:
    depth = deepest = 0
    for byte in raw:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def b64_deep(depth: int) -> str:
    """A page token shaped as issued (base64url JSON), `depth` arrays deep."""
    raw = b"[" * depth + b"]" * depth
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def deep_token(token: str) -> bool:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return False
    return nesting(raw) >= DEEP


def _deep_page_token(request: Message) -> bool:
    token = getattr(request, "page_token", "")
    return isinstance(token, str) and deep_token(token)


GRPC_FINDINGS = [
    GrpcFinding(
        "#35 finding 2: start_time/end_time outside Timestamp's range -> INTERNAL",
        _timestamp_out_of_range,
    ),
    GrpcFinding("#35 finding 3: a page_token of deeply nested JSON -> INTERNAL", _deep_page_token),
]


@dataclass(frozen=True)
class Sent:
    """An HTTP request as the fuzz sent it."""

    method: str
    path: str  # the OpenAPI template, e.g. /v1/runs/{id}/events
    query: dict[str, str]
    headers: dict[str, str]


@dataclass(frozen=True)
class HttpFinding:
    title: str
    matches: Callable[[Sent], bool]


def _huge_resume_point(sent: Sent) -> bool:
    raw = sent.headers.get("Last-Event-ID", "").strip() or sent.query.get("after", "").strip()
    return raw.isascii() and raw.isdigit() and len(raw) > 4300  # int()'s digit limit


def _time_filter(sent: Sent) -> bool:
    return sent.path in ("/v1/runs", "/v1/audit") and bool({"since", "until"} & set(sent.query))


def _deep_query_token(sent: Sent) -> bool:
    return deep_token(sent.query.get("pageToken", ""))


HTTP_FINDINGS = [
    HttpFinding(
        "#35 finding 1: a Last-Event-ID / ?after= of huge digits -> 500", _huge_resume_point
    ),
    HttpFinding(
        "#35 finding 2: since/until out of range on /v1/runs, /v1/audit -> 500", _time_filter
    ),
    HttpFinding("#35 finding 3: a pageToken of deeply nested JSON -> 500", _deep_query_token),
]


def known_http_finding(sent: Sent) -> str | None:
    for finding in HTTP_FINDINGS:
        if finding.matches(sent):
            return finding.title
    return None


def known_grpc_finding(request: Message) -> str | None:
    for finding in GRPC_FINDINGS:
        if finding.matches(request):
            return finding.title
    return None
