"""Stream tokens and the gateway's service identity, without a runtime: the key and the claims a
stream token must carry, the dev key never equal to the user tokens' key, the production checks,
and the OAuth2 client-credentials grant against a real HTTP token endpoint (discovery, Basic
auth, the token cached until shortly before it expires)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tether_common.config import Settings
from tether_common.errors import Unauthenticated, Unavailable
from tether_gateway import service_identity, stream_tokens
from tether_gateway.service_identity import ClientCredentialsIdentity, DevServiceIdentity
from tether_gateway.stream_tokens import StreamTokens, is_stream_token, stream_token_key

USER_KEY = "u" * 40


def tokens(ttl_s: float = 120, leeway_s: float = 0) -> StreamTokens:
    return StreamTokens("k" * 40, ttl_s, leeway_s)


def test_a_stream_token_names_one_run_one_user_and_expires_within_the_ttl() -> None:
    tok, exp = tokens().mint("alice", "run_1", not_after=time.time() + 3600, session_jti="s1")
    claims = jwt.decode(tok, options={"verify_signature": False})
    assert claims["iss"] == "tether-gateway" and claims["aud"] == "tether-stream"
    assert (claims["sub"], claims["run"], claims["scope"], claims["sid"]) == (
        "alice",
        "run_1",
        "stream",
        "s1",
    )
    assert claims["jti"] and claims["exp"] == exp and exp - time.time() <= 120
    grant = tokens().verify(tok)
    assert (grant.user_id, grant.run_id, grant.session_jti) == ("alice", "run_1", "s1")
    assert is_stream_token(tok)


def test_a_stream_token_never_outlives_its_minting_token() -> None:
    soon = time.time() + 5
    _, exp = tokens().mint("alice", "run_1", not_after=soon)
    assert exp <= soon
    with pytest.raises(Unauthenticated):
        tokens().mint("alice", "run_1", not_after=time.time() - 1)


def test_forged_expired_or_foreign_stream_tokens_are_refused() -> None:
    good, _ = tokens().mint("alice", "run_1", not_after=time.time() + 60)
    claims = jwt.decode(good, options={"verify_signature": False})
    bad = {
        "other key": jwt.encode(claims, USER_KEY, algorithm="HS256"),
        "wrong aud": jwt.encode({**claims, "aud": "x"}, "k" * 40, algorithm="HS256"),
        "wrong iss": jwt.encode({**claims, "iss": "x"}, "k" * 40, algorithm="HS256"),
        "no run": jwt.encode({k: v for k, v in claims.items() if k != "run"}, "k" * 40),
        "expired": jwt.encode({**claims, "exp": int(time.time()) - 5}, "k" * 40),
        "alg none": jwt.encode(claims, None, algorithm="none"),
    }
    for name, tok in bad.items():
        with pytest.raises(Unauthenticated):
            tokens().verify(tok)
            pytest.fail(f"{name} was accepted")


def test_the_dev_key_is_derived_never_the_user_key_and_production_needs_its_own() -> None:
    dev = Settings(jwt_secret=USER_KEY)
    key = stream_token_key(dev)
    assert key and key != USER_KEY
    assert stream_token_key(dev.model_copy(update={"stream_token_secret": "s" * 40})) == "s" * 40
    prod = Settings(env="production", jwt_secret="")
    assert stream_token_key(prod) == ""
    assert stream_tokens.production_problems(prod)
    assert stream_tokens.production_problems(prod.model_copy(update={"stream_token_secret": "s"}))
    ok = prod.model_copy(update={"stream_token_secret": "s" * 40})
    assert stream_tokens.production_problems(ok) == []
    assert service_identity.production_problems(ok), "no client credentials"


async def test_the_dev_service_token_acts_on_behalf_and_is_cached() -> None:
    identity = DevServiceIdentity(USER_KEY)
    tok = await identity.token()
    claims = jwt.decode(tok, USER_KEY, algorithms=["HS256"])
    assert claims["scope"] == "service" and claims["on_behalf"] is True and claims["jti"]
    assert claims["exp"] - time.time() <= 300
    assert await identity.token() == tok


@pytest.fixture
async def issuer() -> AsyncIterator[tuple[TestServer, list[dict[str, Any]]]]:
    grants: list[dict[str, Any]] = []

    async def discovery(request: web.Request) -> web.Response:
        return web.json_response({"token_endpoint": str(request.url.with_path("/token"))})

    async def token(request: web.Request) -> web.Response:
        form = dict(await request.post())
        grants.append({"form": form, "auth": request.headers.get("Authorization", "")})
        if request.headers.get("Authorization") != aiohttp.encode_basic_auth("gw", "s3cret"):
            return web.json_response({"error": "invalid_client"}, status=401)
        return web.json_response(
            {"access_token": f"svc-{len(grants)}", "token_type": "Bearer", "expires_in": 3600}
        )

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", discovery)
    app.router.add_post("/token", token)
    server = TestServer(app)
    await server.start_server()
    yield server, grants
    await server.close()


async def test_client_credentials_are_granted_once_and_cached(issuer: Any) -> None:
    server, grants = issuer
    identity = ClientCredentialsIdentity(str(server.make_url("")), "gw", "s3cret")
    try:
        assert await identity.token() == "svc-1"
        assert await identity.token() == "svc-1"  # cached: no second grant
    finally:
        await identity.close()
    assert len(grants) == 1
    assert grants[0]["form"]["grant_type"] == "client_credentials"
    assert set(grants[0]["form"]["scope"].split()) == {"tether.service", "tether.on_behalf"}


async def test_refused_client_credentials_are_unavailable_without_the_secret(issuer: Any) -> None:
    server, _ = issuer
    identity = ClientCredentialsIdentity(str(server.make_url("")), "gw", "wrong")
    try:
        with pytest.raises(Unavailable) as info:
            await identity.token()
    finally:
        await identity.close()
    assert "wrong" not in info.value.message
