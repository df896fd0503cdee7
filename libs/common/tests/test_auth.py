"""Verified tokens are remembered, but never past their expiry and never for another secret."""

from __future__ import annotations

import time

import pytest
from tether_common import auth
from tether_common.auth import issue_token, verify_token
from tether_common.errors import Unauthenticated

SECRET = "s" * 48


def test_a_remembered_token_still_expires() -> None:
    token = issue_token(SECRET, "alice", ttl_s=1)
    exp = auth.jwt.decode(token, options={"verify_signature": False})["exp"]
    assert verify_token(SECRET, token).user_id == "alice"
    assert verify_token(SECRET, token).user_id == "alice"  # from the cache
    time.sleep(max(0.0, exp - time.time()) + 0.05)
    with pytest.raises(Unauthenticated):
        verify_token(SECRET, token)


def test_a_remembered_token_is_not_valid_under_another_secret() -> None:
    token = issue_token(SECRET, "alice", ttl_s=60)
    verify_token(SECRET, token)
    with pytest.raises(Unauthenticated):
        verify_token("t" * 48, token)


def test_failures_are_not_remembered() -> None:
    token = issue_token(SECRET, "alice", ttl_s=-5)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            verify_token(SECRET, token)
    assert not any(tok == token for _, tok in auth._VERIFIED)
