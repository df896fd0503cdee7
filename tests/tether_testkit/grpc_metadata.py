"""Hypothesis strategies for the metadata of a gRPC call: a valid bearer token most of the time
(so the fuzz reaches the handlers), else none, garbage, JWT-shaped garbage, or a dev-issuer
token signed with the right secret but carrying odd claims; plus the other metadata the runtime
reads (x-tether-on-behalf-of, x-forwarded-for, traceparent) with any printable value."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from hypothesis import strategies as st
from tether_common.auth import DEV_ALGORITHM, issue_token

from tether_testkit.proto_strategies import b64, json_values
from tether_testkit.secrets import TEST_SECRET

Metadata = tuple[tuple[str, str], ...]
# A metadata value is printable ASCII on the wire.
PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)
ALGORITHMS = ["none", "HS256", "HS512", "RS256", "ES256", "PS256", "EdDSA", "", "hs256"]
CLAIM_NAMES = ["sub", "exp", "iat", "nbf", "scope", "run", "on_behalf", "jti", "aud", "iss"]


def claims() -> st.SearchStrategy[dict[str, Any]]:
    odd = st.one_of(
        json_values(),
        st.sampled_from([2**63, 10**400, -(10**400), 2**40, -1, 0, 1e308, "user", "service"]),
    )
    return st.dictionaries(st.sampled_from(CLAIM_NAMES), odd, max_size=6)


def jwt_shaped() -> st.SearchStrategy[str]:
    """Three base64url parts; any header (alg included) and payload; a random signature."""
    header = st.fixed_dictionaries(
        {"alg": st.one_of(st.sampled_from(ALGORITHMS), PRINTABLE)},
        optional={"typ": st.just("JWT"), "kid": PRINTABLE, "crit": json_values()},
    )
    return st.builds(
        lambda h, c, sig: ".".join([b64(json.dumps(h).encode()), b64(json.dumps(c).encode()), sig]),
        header,
        claims(),
        st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", max_size=60),
    )


def signed(payload: dict[str, Any]) -> str:
    """HS256 with the dev secret, by hand: PyJWT's encoder refuses some of the odd claims."""
    head = b64(json.dumps({"alg": DEV_ALGORITHM, "typ": "JWT"}).encode())
    body = b64(json.dumps(payload).encode())
    mac = hmac.new(TEST_SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256)
    return f"{head}.{body}.{b64(mac.digest())}"


def signed_odd_claims() -> st.SearchStrategy[str]:
    """Signed with the dev secret: every check but the claims' own passes."""
    return claims().map(signed)


def valid(user: str) -> Metadata:
    return (("authorization", f"Bearer {issue_token(TEST_SECRET, user)}"),)


def odd_authorization(user: str) -> st.SearchStrategy[str | None]:
    service = st.just(
        f"Bearer {issue_token(TEST_SECRET, 'svc-fuzz', scope='service', on_behalf=True)}"
    )
    stream = st.just(f"Bearer {issue_token(TEST_SECRET, user, scope='stream', run_id='run_x')}")
    bad = st.one_of(
        st.none(),
        PRINTABLE,
        PRINTABLE.map(lambda t: f"Bearer {t}"),
        jwt_shaped().map(lambda t: f"Bearer {t}"),
        signed_odd_claims().map(lambda t: f"Bearer {t}"),
    )
    return st.one_of(service, stream, bad)


def metadata(user: str) -> st.SearchStrategy[Metadata]:
    extra = st.fixed_dictionaries(
        {},
        optional={
            "x-tether-on-behalf-of": st.one_of(st.just(user), PRINTABLE),
            "x-forwarded-for": PRINTABLE,
            "traceparent": PRINTABLE,
        },
    )

    def build(auth: str | None, more: dict[str, str]) -> Metadata:
        pairs = [("authorization", auth)] if auth is not None else []
        return tuple(pairs + sorted(more.items()))

    # Three in four calls carry the user's plain token, so most reach the handler's own checks.
    plain = st.just(valid(user))
    return st.one_of(plain, plain, plain, st.builds(build, odd_authorization(user), extra))
