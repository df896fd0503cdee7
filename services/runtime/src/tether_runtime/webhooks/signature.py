"""Signing a webhook as Stripe does: HMAC-SHA256 over `{timestamp}.{body}` with the endpoint's
secret, sent as `Tether-Signature: t={timestamp},v1={hex digest}`. Receivers verify with
`tether_client.webhooks.verify` (or the same three lines in any language)."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "Tether-Signature"
EVENT_ID_HEADER = "Tether-Event-Id"
EVENT_TYPE_HEADER = "Tether-Event-Type"
ATTEMPT_HEADER = "Tether-Delivery-Attempt"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"
