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

DEEP = 500  # nesting the JSON parser cannot take (it recurses)


@dataclass(frozen=True)
class GrpcFinding:
    title: str  # "#35 finding N: ..."
    matches: Callable[[Message], bool]


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


GRPC_FINDINGS: list[GrpcFinding] = []


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


HTTP_FINDINGS: list[HttpFinding] = []


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
