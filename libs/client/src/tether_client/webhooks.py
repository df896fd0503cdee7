"""Verifying Tether's webhooks in a receiver (docs/webhooks.md).

    from tether_client.webhooks import verify, InvalidSignature

    event = verify(body, request.headers["Tether-Signature"], secret)  # raises InvalidSignature
    if seen(event["id"]): return 200          # at least once: deduplicate by the event id

A delivery is signed as Stripe's are: `Tether-Signature: t={unix seconds},v1={hex}` where hex is
HMAC-SHA256 over `{t}.{raw body}` with the endpoint's secret. Verify the raw bytes as received
(before any JSON parsing) and refuse an old timestamp, so a captured delivery cannot be replayed
later. Standard library only."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

SIGNATURE_HEADER = "Tether-Signature"
EVENT_ID_HEADER = "Tether-Event-Id"
DEFAULT_TOLERANCE_S = 300.0


class InvalidSignature(Exception):
    """The delivery is not from the holder of the secret, or is too old (or from the future)."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `Tether-Signature` header value for this body at this time (for tests of receivers)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def _parse(header: str) -> tuple[int, list[str]]:
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise InvalidSignature("the signature's timestamp is not a number") from None
        elif key == "v1" and value:
            signatures.append(value)
    if timestamp is None or not signatures:
        raise InvalidSignature("the signature header needs t=... and v1=...")
    return timestamp, signatures


def verify(
    body: bytes,
    header: str | None,
    secret: str,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """The event (parsed JSON) if `header` signs `body` with `secret` within `tolerance_s` of
    now; else InvalidSignature. Several `v1=` values are accepted (one per secret during a
    rotation); any one matching is enough."""
    if not header:
        raise InvalidSignature(f"no {SIGNATURE_HEADER} header")
    timestamp, signatures = _parse(header)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise InvalidSignature("the signature's timestamp is outside the tolerance (a replay?)")
    expected = sign(secret, timestamp, body).partition(",v1=")[2]
    if not any(hmac.compare_digest(expected, s) for s in signatures):
        raise InvalidSignature("the signature does not match this body and secret")
    event: dict[str, Any] = json.loads(body)
    return event
