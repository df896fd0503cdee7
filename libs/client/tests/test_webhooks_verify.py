"""tether_client.webhooks.verify: what a receiver accepts and what it refuses."""

from __future__ import annotations

import json

import pytest
from tether_client.webhooks import InvalidSignature, sign, verify

SECRET = "whsec-0123456789abcdef"
BODY = json.dumps({"id": "evt_run_1_7", "type": "interrupt.raised", "data": {}}).encode()
NOW = 1_767_225_600


def test_a_signed_body_verifies_and_parses() -> None:
    header = sign(SECRET, NOW, BODY)
    assert header.startswith(f"t={NOW},v1=")
    assert verify(BODY, header, SECRET, now=NOW + 10)["id"] == "evt_run_1_7"


@pytest.mark.parametrize(
    "body, header, secret, now",
    [
        (BODY + b" ", sign(SECRET, NOW, BODY), SECRET, NOW),  # another body
        (BODY, sign(SECRET, NOW, BODY), SECRET + "x", NOW),  # another secret
        (BODY, sign(SECRET, NOW, BODY), SECRET, NOW + 301),  # too old: a replay
        (BODY, sign(SECRET, NOW, BODY), SECRET, NOW - 301),  # from the future
        (BODY, sign(SECRET, NOW, BODY).replace(f"t={NOW}", f"t={NOW + 1}"), SECRET, NOW),
        (BODY, None, SECRET, NOW),
        (BODY, "", SECRET, NOW),
        (BODY, "v1=abc", SECRET, NOW),
        (BODY, "t=soon,v1=abc", SECRET, NOW),
        (BODY, f"t={NOW}", SECRET, NOW),
    ],
)
def test_anything_else_is_refused(body: bytes, header: str | None, secret: str, now: int) -> None:
    with pytest.raises(InvalidSignature):
        verify(body, header, secret, now=now)


def test_any_one_of_several_signatures_is_enough() -> None:
    good = sign(SECRET, NOW, BODY).partition(",")[2]
    assert verify(BODY, f"t={NOW},v1=deadbeef,{good}", SECRET, now=NOW)
