"""The dev issuer (HS256), the verified-token cache (never past a token's expiry, never for
another key, never past the revocation hook) and what a principal may do."""

from __future__ import annotations

import asyncio
import time

import jwt
import pytest
from tether_common.auth import (
    TokenVerifier,
    issue_token,
    verify_token,
)
from tether_common.config import Settings
from tether_common.errors import InvalidArgument, PermissionDenied, Unauthenticated

SECRET = "s" * 48


async def test_a_remembered_token_still_expires() -> None:
    v = TokenVerifier(dev_secret=SECRET, leeway_s=0)
    token = issue_token(SECRET, "alice", ttl_s=1)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    assert (await v.verify(token)).user_id == "alice"
    assert (await v.verify(token)).user_id == "alice"  # from the cache
    assert token in v._verified
    await asyncio.sleep(max(0.0, exp - time.time()) + 0.05)
    with pytest.raises(Unauthenticated, match="expired"):
        await v.verify(token)


async def test_expired_tokens_are_refused_beyond_the_leeway_only() -> None:
    v = TokenVerifier(dev_secret=SECRET, leeway_s=30)
    assert (await v.verify(issue_token(SECRET, "alice", ttl_s=-10))).user_id == "alice"
    with pytest.raises(Unauthenticated, match="expired"):
        await v.verify(issue_token(SECRET, "alice", ttl_s=-45))
    assert not any(p.principal.exp < time.time() for p in v._verified.values()), (
        "a token accepted only by the leeway is not remembered"
    )


async def test_a_remembered_token_is_not_valid_under_another_secret() -> None:
    token = issue_token(SECRET, "alice", ttl_s=60)
    await TokenVerifier(dev_secret=SECRET).verify(token)
    with pytest.raises(Unauthenticated):
        await TokenVerifier(dev_secret="t" * 48).verify(token)


async def test_failures_are_not_remembered() -> None:
    v = TokenVerifier(dev_secret=SECRET)
    token = issue_token(SECRET, "alice", ttl_s=-60)
    for _ in range(2):
        with pytest.raises(Unauthenticated):
            await v.verify(token)
    assert not v._verified


async def test_no_dev_secret_no_hs256_and_never_alg_none() -> None:
    token = issue_token(SECRET, "alice")
    with pytest.raises(Unauthenticated):
        await TokenVerifier().verify(token)  # production: no dev issuer
    unsigned = jwt.encode({"sub": "alice", "exp": time.time() + 60}, None, algorithm="none")
    with pytest.raises(Unauthenticated):
        await TokenVerifier(dev_secret=SECRET).verify(unsigned)
    # A dev-signed token carrying an audience (a gateway stream token's shape) is no user token.
    aud = jwt.encode({"sub": "a", "exp": time.time() + 60, "aud": "tether-stream"}, SECRET)
    with pytest.raises(Unauthenticated):
        await TokenVerifier(dev_secret=SECRET).verify(aud)


async def test_the_revocation_hook_applies_to_remembered_tokens() -> None:
    revoked: set[str] = set()
    v = TokenVerifier(dev_secret=SECRET, is_revoked=lambda p: p.jti in revoked)
    token = issue_token(SECRET, "alice")
    principal = await v.verify(token)
    assert principal.jti and principal.exp > time.time()
    revoked.add(principal.jti)
    with pytest.raises(Unauthenticated, match="revoked"):
        await v.verify(token)


async def test_dev_service_tokens_and_the_on_behalf_capability() -> None:
    v = TokenVerifier(dev_secret=SECRET)
    plain = await v.verify(issue_token(SECRET, "billing-bot", scope="service"))
    able = await v.verify(issue_token(SECRET, "crm", scope="service", on_behalf=True))
    user = await v.verify(issue_token(SECRET, "alice", on_behalf=True))
    assert (plain.kind, plain.service, plain.on_behalf) == ("service", "billing-bot", False)
    assert (able.kind, able.on_behalf) == ("service", True)
    assert user.kind == "user" and not user.on_behalf
    acting = able.acting_for("alice")
    assert (acting.user_id, acting.service, acting.kind) == ("alice", "crm", "service")
    assert acting.may_act() and not acting.may_approve()
    for who in (plain, user):
        with pytest.raises(PermissionDenied):
            who.acting_for("alice")
    for bad in ("", " alice", "a\nb", "x" * 300):
        with pytest.raises(InvalidArgument):
            able.acting_for(bad)


def test_sync_verify_token_for_the_cli() -> None:
    assert verify_token(SECRET, issue_token(SECRET, "alice")).user_id == "alice"
    stream = verify_token(SECRET, issue_token(SECRET, "alice", scope="stream", run_id="run_1"))
    assert (stream.kind, stream.run_id, stream.may_act()) == ("stream", "run_1", False)


def test_settings_build_the_verifier() -> None:
    dev = TokenVerifier.from_settings(Settings(jwt_secret=SECRET, jwt_leeway_s=5))
    assert dev.oidc is None and dev.dev_secret == SECRET and dev.leeway_s == 5
    env = {
        "TETHER_OIDC_ISSUER": "https://idp.example/realm",
        "TETHER_OIDC_AUDIENCE": "tether-api",
        "TETHER_JWT_LEEWAY_S": "10",
    }
    oidc = TokenVerifier.from_settings(Settings.from_env(env))
    assert oidc.oidc is not None and oidc.oidc.issuer == "https://idp.example/realm"
    assert (oidc.oidc.audience, oidc.oidc.leeway_s) == ("tether-api", 10)
