"""DESIGN invariant 8: with TETHER_ENV=production each service refuses unsafe settings, exits
non-zero and says what would break."""

from __future__ import annotations

import os
import subprocess

import pytest
from tether_testkit.processes import tether_cli

UNSAFE = {
    "TETHER_ENV": "production",
    "TETHER_EMBEDDED_STORES": "1",
    "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/tether",
}
CLEARED = (
    "REDIS_URL",
    "TETHER_JWT_SECRET",
    "TETHER_OIDC_ISSUER",
    "TETHER_OIDC_AUDIENCE",
    "TETHER_OIDC_JWKS_URL",
)
SAFE_STORES = {
    "TETHER_ENV": "production",
    "DATABASE_URL": "postgresql://tether@db.internal:5432/tether",
    "REDIS_URL": "redis://cache.internal:6379/0",
}
IDP = {"TETHER_OIDC_ISSUER": "https://idp.example/realm", "TETHER_OIDC_AUDIENCE": "tether-api"}


def _tether(verb: str, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED} | extra
    return tether_cli(verb, env=env, inherit=False)


@pytest.mark.parametrize("verb", ["runtime", "gateway"])
def test_production_refuses_unsafe_settings_and_says_what_breaks(verb: str) -> None:
    result = _tether(verb, UNSAFE)
    assert result.returncode == 2, result
    err = result.stderr
    assert "refusing to start with TETHER_ENV=production" in err
    assert "TETHER_EMBEDDED_STORES" in err and "lost or invisible to other pods" in err
    assert "REDIS_URL is not set" in err and "never see a run executing on another" in err
    assert "TETHER_OIDC_ISSUER is not set: no token could be verified" in err
    assert "TETHER_OIDC_AUDIENCE is not set" in err
    # A gateway holds no database credentials, so none are asked of it.
    assert ("DATABASE_URL points at this machine" in err) == (verb == "runtime")
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", ["runtime", "gateway"])
def test_a_pod_that_could_mint_tokens_is_refused(verb: str) -> None:
    """Finding 2: in production no pod holds the dev issuer's key, however long or random."""
    result = _tether(verb, {**SAFE_STORES, **IDP, "TETHER_JWT_SECRET": "k" * 64})
    assert result.returncode == 2, result
    assert "TETHER_JWT_SECRET is set" in result.stderr and "mint" in result.stderr
    assert "REDIS_URL" not in result.stderr and "TETHER_OIDC_ISSUER is not" not in result.stderr


@pytest.mark.parametrize(
    ("idp", "says"),
    [
        ({**IDP, "TETHER_OIDC_ISSUER": "http://idp.example/realm"}, "not an https URL"),
        ({**IDP, "TETHER_OIDC_JWKS_URL": "http://idp.example/jwks"}, "TETHER_OIDC_JWKS_URL"),
        ({"TETHER_OIDC_ISSUER": IDP["TETHER_OIDC_ISSUER"]}, "without TETHER_OIDC_AUDIENCE"),
    ],
)
def test_an_issuer_that_could_be_spoofed_or_never_matches_is_refused(
    idp: dict[str, str], says: str
) -> None:
    result = _tether("runtime", {**SAFE_STORES, **idp})
    assert result.returncode == 2, result
    assert says in result.stderr and "Traceback" not in result.stderr


def test_dev_refuses_production() -> None:
    result = _tether("dev", {"TETHER_ENV": "production"})
    assert result.returncode == 2, result
    assert "refusing" in result.stderr and "TETHER_ENV=production" in result.stderr


def test_a_production_gateway_needs_its_own_stream_token_key() -> None:
    # Otherwise production-safe: stores off this machine, tokens from an IdP, no dev issuer key.
    safe = {**SAFE_STORES, **IDP}
    for key, why in (
        ("", "TETHER_STREAM_TOKEN_SECRET is not set"),
        ("short", "TETHER_STREAM_TOKEN_SECRET is shorter than 32 bytes"),
    ):
        result = _tether("gateway", {**safe, "TETHER_STREAM_TOKEN_SECRET": key})
        assert result.returncode == 2, result
        assert why in result.stderr and "Traceback" not in result.stderr, result.stderr
