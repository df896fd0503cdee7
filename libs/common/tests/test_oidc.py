"""Tokens from an OIDC issuer (a real one on a socket, `tether_testkit.oidc_issuer`): signature by
its JWKS, `iss`, `aud`, leeway, key rotation by `kid` (one refetch, rate-limited), a withdrawn key
refused even for a remembered token, and no way in for HS256/none or a symmetric JWKS key."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from tether_common.auth import TokenVerifier
from tether_common.errors import Unauthenticated, Unavailable
from tether_common.input_parsers import token_header
from tether_common.oidc import IssuerKeys, OidcIssuer, signing_keys
from tether_testkit.oidc_issuer import TestIssuer
from tether_testkit.processes import free_port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def idp() -> Iterator[TestIssuer]:
    with TestIssuer() as issuer:
        yield issuer


def verifier_for(
    idp: TestIssuer, clock: Clock | None = None, *, leeway_s: float = 30, **keys: Any
) -> TokenVerifier:
    issuer_keys = IssuerKeys(idp.issuer, clock=clock or time.monotonic, **keys)
    return TokenVerifier(oidc=OidcIssuer(issuer_keys, idp.audience, leeway_s), leeway_s=leeway_s)


async def test_a_user_token_by_discovery_and_jwks(idp: TestIssuer) -> None:
    v = verifier_for(idp)
    try:
        p = await v.verify(idp.token("alice"))
        assert (p.user_id, p.kind, p.service, p.on_behalf) == ("alice", "user", "", False)
        assert p.jti and p.exp > time.time()
        assert (idp.discovery_requests, idp.jwks_requests) == (1, 1)
    finally:
        await v.aclose()


async def test_service_scopes_make_a_service_principal(idp: TestIssuer) -> None:
    v = verifier_for(idp)
    try:
        plain = await v.verify(idp.service_token("billing-bot"))
        assert (plain.kind, plain.service, plain.on_behalf) == ("service", "billing-bot", False)
        able = await v.verify(idp.token("crm", scp=["tether.service", "tether.on_behalf"]))
        assert (able.kind, able.on_behalf) == ("service", True)
        assert able.acting_for("alice").user_id == "alice" and not able.may_approve()
        # The on-behalf scope alone does not make a user's token a service's.
        user = await v.verify(idp.token("bob", scope="openid tether.on_behalf"))
        assert (user.kind, user.on_behalf) == ("user", False)
    finally:
        await v.aclose()


async def test_wrong_issuer_audience_and_missing_claims_are_refused(idp: TestIssuer) -> None:
    v = verifier_for(idp)
    bad = {
        "wrong iss": idp.token("alice", iss="https://evil.example/realm"),
        "wrong aud": idp.token("alice", aud="another-app"),
        "aud list without ours": idp.token("alice", aud=["x", "y"]),
        "no aud": idp.sign({k: v for k, v in idp.claims("alice").items() if k != "aud"}),
        "no iss": idp.sign({k: v for k, v in idp.claims("alice").items() if k != "iss"}),
        "no exp": idp.sign({k: v for k, v in idp.claims("alice").items() if k != "exp"}),
        "empty sub": idp.token(""),
        "not yet valid": idp.token("alice", nbf=int(time.time()) + 120),
        "unknown kid": idp.sign(idp.claims("alice"), kid=_unlisted_kid(idp)),
    }
    try:
        assert (await v.verify(idp.token("alice", aud=["x", idp.audience]))).user_id == "alice"
        for name, token in bad.items():
            with pytest.raises(Unauthenticated):
                await v.verify(token)
                pytest.fail(f"{name} was accepted")
    finally:
        await v.aclose()


def _unlisted_kid(idp: TestIssuer) -> str:
    kid = idp.rotate()
    idp.withdraw(kid)
    return kid


async def test_alg_confusion_none_and_symmetric_keys_are_refused(idp: TestIssuer) -> None:
    v = verifier_for(idp)
    key = idp.keys[idp.current_kid]
    pem = key.public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    claims = idp.claims("alice")
    forged_hs256 = _hs256(claims, pem, key.kid)
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": key.kid})
    # With the dev issuer configured too (as in `tether dev`): HS256 goes to it, and fails there.
    both = TokenVerifier(dev_secret="d" * 48, oidc=v.oidc)
    assert v.oidc is not None
    try:
        await v.verify(idp.token("alice"))  # the keys are loaded: nothing below fails for that
        for token in (forged_hs256, unsigned):
            for verifier in (v, both):
                with pytest.raises(Unauthenticated):
                    await verifier.verify(token)
            # The OIDC check itself never takes a symmetric or absent algorithm.
            with pytest.raises(Unauthenticated):
                await v.oidc.claims(token, token_header(token))
    finally:
        await v.aclose()
    # A symmetric or encryption key in a JWKS is never a signing key.
    jwks = {
        "keys": [
            {"kty": "oct", "kid": "h", "k": "c2VjcmV0"},
            {**key.jwk(), "kid": "enc", "use": "enc"},
            {**key.jwk(), "kid": "hs", "alg": "HS256"},
            {**key.jwk(), "kid": "ok"},
        ]
    }
    assert list(signing_keys(jwks)) == ["ok"]


def _hs256(claims: dict[str, Any], secret: bytes, kid: str) -> str:
    """HS256 with the public key as the HMAC secret (PyJWT refuses to do this, rightly)."""
    import base64
    import hashlib
    import hmac
    import json

    def b64(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
    body = b64(json.dumps(claims).encode())
    sig = b64(hmac.new(secret, head + b"." + body, hashlib.sha256).digest())
    return (head + b"." + body + b"." + sig).decode()


async def test_leeway_on_expiry(idp: TestIssuer) -> None:
    v = verifier_for(idp, leeway_s=30)
    now = int(time.time())
    try:
        assert (await v.verify(idp.token("alice", exp=now - 10))).user_id == "alice"
        with pytest.raises(Unauthenticated, match="expired"):
            await v.verify(idp.token("alice", exp=now - 45))
        # Issued "in the future" by a clock a few seconds ahead: within the leeway.
        assert await v.verify(idp.token("alice", iat=now + 10, nbf=now + 10))
    finally:
        await v.aclose()


async def test_rotation_one_refetch_for_a_new_kid_and_garbage_kids_are_rate_limited(
    idp: TestIssuer,
) -> None:
    clock = Clock()
    v = verifier_for(idp, clock, ttl_s=600, refetch_s=10)
    try:
        old = idp.current_kid
        await v.verify(idp.token("alice"))
        assert idp.jwks_requests == 1
        clock.now += 11
        new = idp.rotate()
        assert (await v.verify(idp.token("alice", kid=new))).user_id == "alice"
        assert idp.jwks_requests == 2, "a new kid is fetched once"
        assert await v.verify(idp.token("bob", kid=old)), "the old key is still listed"
        # Made-up kids: refused, and at most one fetch per refetch interval whatever their number.
        for _ in range(50):
            with pytest.raises(Unauthenticated):
                await v.verify(idp.sign(idp.claims("x"), claimed_kid=uuid.uuid4().hex))
        assert idp.jwks_requests == 2
        clock.now += 11
        for _ in range(50):
            with pytest.raises(Unauthenticated):
                await v.verify(idp.sign(idp.claims("x"), claimed_kid=uuid.uuid4().hex))
        assert idp.jwks_requests == 3
    finally:
        await v.aclose()


async def test_a_withdrawn_key_is_refused_even_for_a_remembered_token(idp: TestIssuer) -> None:
    clock = Clock()
    v = verifier_for(idp, clock, ttl_s=60, refetch_s=5)
    try:
        old = idp.current_kid
        remembered = idp.token("alice")
        await v.verify(remembered)
        new = idp.rotate()
        idp.withdraw(old)
        assert await v.verify(remembered), "within the JWKS TTL the remembered token stands"
        clock.now += 61  # the TTL: the JWKS is fetched again and no longer lists the old key
        with pytest.raises(Unauthenticated):
            await v.verify(remembered)
        with pytest.raises(Unauthenticated):
            await v.verify(idp.token("alice", kid=old))
        assert (await v.verify(idp.token("alice", kid=new))).user_id == "alice"
    finally:
        await v.aclose()


async def test_jwks_url_given_skips_discovery_and_es256_keys_work() -> None:
    with TestIssuer() as idp:
        kid = idp.rotate("ES256")
        keys = IssuerKeys(idp.issuer, jwks_url=idp.jwks_url)
        v = TokenVerifier(oidc=OidcIssuer(keys, idp.audience, 30))
        try:
            assert (await v.verify(idp.token("alice", kid=kid))).user_id == "alice"
            assert idp.discovery_requests == 0
        finally:
            await v.aclose()


async def test_an_unreachable_idp_is_unavailable_not_an_open_door() -> None:
    keys = IssuerKeys(f"http://127.0.0.1:{free_port()}/realm", timeout_s=2)
    v = TokenVerifier(oidc=OidcIssuer(keys, "tether-api", 30))
    with TestIssuer() as other:  # a well-formed token, but its issuer is down
        token = other.token("alice", iss=keys.issuer)
    try:
        with pytest.raises(Unavailable):
            await v.verify(token)
    finally:
        await v.aclose()


async def test_a_discovery_document_naming_another_issuer_is_not_trusted(idp: TestIssuer) -> None:
    # The issuer setting differs from what the discovery document says (a trailing slash).
    keys = IssuerKeys(idp.issuer + "/", timeout_s=2)
    v = TokenVerifier(oidc=OidcIssuer(keys, idp.audience, 30))
    try:
        with pytest.raises(Unavailable):
            await v.verify(idp.token("alice", iss=idp.issuer + "/"))
    finally:
        await v.aclose()


async def test_an_oidc_token_is_not_accepted_by_a_dev_only_verifier(idp: TestIssuer) -> None:
    v = TokenVerifier(dev_secret="s" * 48)
    with pytest.raises(Unauthenticated):
        await v.verify(idp.token("alice"))


async def test_the_test_issuer_grants_client_credentials(idp: TestIssuer) -> None:
    """The testkit's token endpoint (a gateway's own service identity uses it)."""
    import base64

    import aiohttp

    idp.add_client("gateway", "s3cret", on_behalf=True)
    url = f"{idp.issuer}/token"
    v = verifier_for(idp)
    try:
        async with aiohttp.ClientSession() as http:
            grant = {"grant_type": "client_credentials"}
            basic = {"Authorization": "Basic " + base64.b64encode(b"gateway:s3cret").decode()}
            async with http.post(url, data=grant, headers=basic) as r:
                assert r.status == 200
                access = (await r.json())["access_token"]
            wrong = {**grant, "client_id": "gateway", "client_secret": "nope"}
            async with http.post(url, data=wrong) as r:
                assert r.status == 401
        p = await v.verify(access)
        assert (p.user_id, p.kind, p.on_behalf) == ("gateway", "service", True)
    finally:
        await v.aclose()


async def test_a_key_without_alg_verifies_only_the_algorithms_of_its_type(idp: TestIssuer) -> None:
    """Issue #35 finding 1: a JWKS may leave `alg` out (Entra ID does). A token naming such a key
    with an algorithm of another key type (ES256 on an RSA key, RS256 on an EC key, EdDSA on
    either) is UNAUTHENTICATED; PyJWT was handed the key anyway and raised TypeError."""
    import base64
    import json

    from tether_common.oidc import ASYMMETRIC_ALGORITHMS

    rsa_kid = idp.publish("RS256", publish_alg=False)
    ec_kid = idp.publish("ES256", publish_alg=False)
    v = verifier_for(idp)

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    body = b64(json.dumps(idp.claims("alice")).encode())
    try:
        for kid in (rsa_kid, ec_kid):
            assert (await v.verify(idp.token("alice", kid=kid))).user_id == "alice"
            for alg in sorted(ASYMMETRIC_ALGORITHMS):
                head = b64(json.dumps({"alg": alg, "kid": kid}).encode())
                with pytest.raises(Unauthenticated):
                    await v.verify(f"{head}.{body}.c2ln")
    finally:
        await v.aclose()
