"""Tether's own stream tokens: an `EventSource` cannot send headers, so a caller trades its token
for a short-lived one that reads one run's events and travels in the URL. Signed with a key only
the gateways hold (TETHER_STREAM_TOKEN_SECRET), so a runtime, which never holds it, cannot be
handed one; the gateway reads the run on the token's user's behalf with its own service identity
(service_identity.py)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass

import jwt
from tether_common.config import MIN_SECRET_BYTES, Settings
from tether_common.errors import Unauthenticated

ISSUER = "tether-gateway"
AUDIENCE = "tether-stream"
_ALGORITHMS = ["HS256"]
# The dev key is derived from the dev issuer's key under a label, so the two never coincide: a
# stream token is no user token, even in dev.
_DEV_LABEL = b"tether stream tokens v1"


def stream_token_key(settings: Settings) -> str:
    """The key stream tokens are signed with: TETHER_STREAM_TOKEN_SECRET, or in dev one derived
    from TETHER_JWT_SECRET. Empty when there is neither (stream tokens are then refused)."""
    if settings.stream_token_secret:
        return settings.stream_token_secret
    if settings.env == "production" or not settings.jwt_secret:
        return ""
    return hmac.new(settings.jwt_secret.encode(), _DEV_LABEL, hashlib.sha256).hexdigest()


def production_problems(settings: Settings) -> list[str]:
    """A production gateway's reasons to refuse to start, as to stream tokens."""
    secret = settings.stream_token_secret
    if not secret:
        return [
            "TETHER_STREAM_TOKEN_SECRET is not set: the gateway could not sign stream tokens "
            "(EventSource streams would all be refused)"
        ]
    if len(secret.encode()) < MIN_SECRET_BYTES:
        return [f"TETHER_STREAM_TOKEN_SECRET is shorter than {MIN_SECRET_BYTES} bytes"]
    if settings.jwt_secret and hmac.compare_digest(secret, settings.jwt_secret):
        return ["TETHER_STREAM_TOKEN_SECRET must not be the user tokens' key"]
    return []


@dataclass(frozen=True)
class StreamGrant:
    """What a verified stream token allows: reading `run_id` as `user_id` until `expires_at`."""

    user_id: str
    run_id: str
    jti: str
    expires_at: float
    session_jti: str = ""  # the minting caller's token: revoking it revokes this one too


def is_stream_token(token: str) -> bool:
    """Whether a token claims to be one of ours (only then is it verified with our key). The
    claim is unverified here: a forged one fails `verify` like any other bad token."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return False
    return claims.get("iss") == ISSUER


class StreamTokens:
    """Mints and verifies stream tokens with the gateways' key."""

    def __init__(self, key: str, ttl_s: float, leeway_s: float) -> None:
        self.key = key
        self.ttl_s = ttl_s
        self.leeway_s = leeway_s

    @classmethod
    def from_settings(cls, settings: Settings) -> StreamTokens:
        return cls(stream_token_key(settings), settings.stream_token_ttl_s, settings.jwt_leeway_s)

    def mint(
        self, user_id: str, run_id: str, *, not_after: float, session_jti: str = ""
    ) -> tuple[str, float]:
        """A token for `run_id`, expiring after the TTL and never past `not_after` (the minting
        caller's own token's expiry): a stream token cannot outlive the login it came from, nor
        its sign-out (`sid`: that login's `jti`, checked against the revoked ones too)."""
        if not self.key:
            raise Unauthenticated("stream tokens are not available (no stream token key)")
        now = time.time()
        exp = int(min(now + self.ttl_s, not_after))
        if exp <= now:
            raise Unauthenticated("token expired")
        claims: dict[str, object] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": user_id,
            "run": run_id,
            "scope": "stream",
            "jti": uuid.uuid4().hex,
            "iat": int(now),
            "exp": exp,
        }
        if session_jti:
            claims["sid"] = session_jti
        return jwt.encode(claims, self.key, algorithm="HS256"), float(exp)

    def verify(self, token: str) -> StreamGrant:
        """Signature, issuer, audience and expiry (with the clock leeway); any failure is
        UNAUTHENTICATED without saying which part failed."""
        if not self.key:
            raise Unauthenticated("invalid token")
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=_ALGORITHMS,
                issuer=ISSUER,
                audience=AUDIENCE,
                leeway=self.leeway_s,
                options={"require": ["sub", "run", "jti", "exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as err:
            raise Unauthenticated("token expired") from err
        except jwt.PyJWTError as err:
            raise Unauthenticated("invalid token") from err
        sub, run, jti, exp = claims["sub"], claims["run"], claims["jti"], claims["exp"]
        if claims.get("scope") != "stream" or not all(
            isinstance(v, str) and v for v in (sub, run, jti)
        ):
            raise Unauthenticated("invalid token")
        sid = claims.get("sid", "")
        return StreamGrant(sub, run, jti, float(exp), sid if isinstance(sid, str) else "")
