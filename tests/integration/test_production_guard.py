"""DESIGN invariant 8: with TETHER_ENV=production each service refuses unsafe settings, exits
non-zero and says what would break."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

UNSAFE = {
    "TETHER_ENV": "production",
    "TETHER_EMBEDDED_STORES": "1",
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/tether",
}
CLEARED = ("REDIS_URL", "TETHER_JWT_SECRET")


def _tether(verb: str, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED} | extra
    return subprocess.run(
        [sys.executable, "-m", "tether_cli.main", verb],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("verb", ["runtime", "gateway"])
def test_production_refuses_unsafe_settings_and_says_what_breaks(verb: str) -> None:
    result = _tether(verb, UNSAFE)
    assert result.returncode == 2, result
    err = result.stderr
    assert "refusing to start with TETHER_ENV=production" in err
    assert "TETHER_EMBEDDED_STORES" in err and "lost or invisible to other pods" in err
    assert "REDIS_URL is not set" in err and "never see a run executing on another" in err
    assert "TETHER_JWT_SECRET" in err and "approve another person's actions" in err
    assert "DATABASE_URL points at this machine" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", ["runtime", "gateway"])
def test_a_short_signing_key_alone_is_refused(verb: str) -> None:
    safe_but_key = {
        "TETHER_ENV": "production",
        "DATABASE_URL": "postgresql://tether@db.internal:5432/tether",
        "REDIS_URL": "redis://cache.internal:6379/0",
        "TETHER_JWT_SECRET": "too-short",
    }
    result = _tether(verb, safe_but_key)
    assert result.returncode == 2, result
    assert "TETHER_JWT_SECRET is shorter than 32 bytes" in result.stderr
    assert "REDIS_URL" not in result.stderr and "DATABASE_URL" not in result.stderr


def test_dev_refuses_production() -> None:
    result = _tether("dev", {"TETHER_ENV": "production"})
    assert result.returncode == 2, result
    assert "refusing" in result.stderr and "TETHER_ENV=production" in result.stderr


def test_a_production_gateway_needs_its_own_stream_token_key() -> None:
    safe = {
        "TETHER_ENV": "production",
        "DATABASE_URL": "postgresql://tether@db.internal:5432/tether",
        "REDIS_URL": "redis://cache.internal:6379/0",
        "TETHER_JWT_SECRET": "k" * 48,
    }
    for key, why in (
        ("", "TETHER_STREAM_TOKEN_SECRET is not set"),
        ("short", "TETHER_STREAM_TOKEN_SECRET is shorter than 32 bytes"),
        ("k" * 48, "must not be the user tokens' key"),
    ):
        result = _tether("gateway", {**safe, "TETHER_STREAM_TOKEN_SECRET": key})
        assert result.returncode == 2, result
        assert why in result.stderr and "Traceback" not in result.stderr, result.stderr
