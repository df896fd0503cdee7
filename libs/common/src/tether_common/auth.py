"""Bearer tokens (HS256 JWT): who the caller is, and for stream tokens which one run they may read."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Literal

import jwt

from tether_common.errors import Unauthenticated

Scope = Literal["user", "stream", "service"]
_ALGORITHMS = ["HS256"]  # never "none", never an algorithm chosen by the token


@dataclass(frozen=True)
class Principal:
    user_id: str
    scope: Scope = "user"
    # For a stream token: the only run it may read.
    run_id: str | None = None

    def may_act(self) -> bool:
        """Stream tokens only read one run's events; every other call needs a user or service."""
        return self.scope in ("user", "service")


def issue_token(
    secret: str, user_id: str, *, ttl_s: float = 3600, scope: Scope = "user", run_id: str = ""
) -> str:
    now = int(time.time())
    claims: dict[str, object] = {
        "sub": user_id,
        "iat": now,
        "exp": now + int(ttl_s),
        "scope": scope,
        "jti": uuid.uuid4().hex,  # what a sign-out revokes (tether_common.revocation)
    }
    if run_id:
        claims["run"] = run_id
    return jwt.encode(claims, secret, algorithm="HS256")


# Tokens already verified (signature and claims) -> (principal, expiry). Every RPC and request
# carries the same few tokens, and an HMAC + JSON decode each time is measurable (`make bench`).
# Only successes are kept, keyed by secret and token, and never past the token's own expiry.
_VERIFIED: dict[tuple[str, str], tuple[Principal, float]] = {}
_VERIFIED_MAX = 10_000


def verify_token(secret: str, token: str) -> Principal:
    """Check signature and expiry; any failure is UNAUTHENTICATED without saying which part failed."""
    hit = _VERIFIED.get((secret, token))
    if hit is not None:
        if time.time() < hit[1]:
            return hit[0]
        del _VERIFIED[(secret, token)]
    principal, exp = _verify(secret, token)
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.clear()
    _VERIFIED[(secret, token)] = (principal, exp)
    return principal


def _verify(secret: str, token: str) -> tuple[Principal, float]:
    try:
        claims = jwt.decode(
            token, secret, algorithms=_ALGORITHMS, options={"require": ["sub", "exp"]}
        )
    except jwt.ExpiredSignatureError as err:
        raise Unauthenticated("token expired") from err
    except jwt.PyJWTError as err:
        raise Unauthenticated("invalid token") from err
    sub = claims.get("sub")
    scope = claims.get("scope", "user")
    if not isinstance(sub, str) or not sub or scope not in ("user", "stream", "service"):
        raise Unauthenticated("invalid token")
    run_id = claims.get("run")
    if scope == "stream" and not isinstance(run_id, str):
        raise Unauthenticated("invalid token")
    exp = claims["exp"]
    if not isinstance(exp, int | float):
        raise Unauthenticated("invalid token")
    return Principal(user_id=sub, scope=scope, run_id=run_id if scope == "stream" else None), exp


def bearer_from_header(value: str | None) -> str:
    if not value:
        raise Unauthenticated("missing bearer token")
    kind, _, token = value.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise Unauthenticated("missing bearer token")
    return token.strip()
