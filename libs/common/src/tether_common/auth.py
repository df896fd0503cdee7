"""Bearer tokens: who the caller is. Two issuers are accepted: the company's OIDC issuer (public
keys from its JWKS, `iss` and `aud` checked), and the HS256 dev issuer (`TETHER_JWT_SECRET`),
kept for `tether dev` and tests and refused in production, where no pod may mint a token.
`TokenVerifier` checks both and remembers what it verified, never past a token's expiry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import jwt

from tether_common.errors import InvalidArgument, PermissionDenied, Unauthenticated
from tether_common.input_parsers import claim_time, token_header
from tether_common.oidc import ASYMMETRIC_ALGORITHMS, IssuerKeys, OidcIssuer

if TYPE_CHECKING:
    from tether_common.config import Settings

Scope = Literal["user", "stream", "service"]
Kind = Scope
DEV_ALGORITHM = "HS256"  # the dev issuer's only algorithm: never "none", never the token's choice
DEFAULT_LEEWAY_S = 30.0
# gRPC metadata: a service with the on-behalf capability names the user it acts for.
ON_BEHALF_METADATA = "x-tether-on-behalf-of"
# OIDC scopes (space-separated `scope`, or an `scp` list) that make a token a service's.
SERVICE_SCOPE = "tether.service"
ON_BEHALF_SCOPE = "tether.on_behalf"
MAX_SUBJECT_CHARS = 255


@dataclass(frozen=True)
class Principal:
    # Whose resources the caller reads and changes: the token's subject, or for a service acting
    # on behalf of a user, that user.
    user_id: str
    scope: Scope = "user"  # the principal's kind: user, service or stream
    # For a stream token: the only run it may read.
    run_id: str | None = None
    jti: str = ""  # the token's id, for revocation ("" when the token carries none)
    exp: float = 0.0  # when the token expires (epoch seconds); 0 for one built in-process
    # A service principal: its own name (the token's subject), also while acting for a user.
    service: str = ""
    # A service that may act on behalf of a user (`x-tether-on-behalf-of`).
    on_behalf: bool = False

    @property
    def kind(self) -> Scope:
        return self.scope

    def may_act(self) -> bool:
        """Stream tokens only read one run's events; every other call needs a user or service."""
        return self.scope in ("user", "service")

    def may_approve(self) -> bool:
        """Only a person approves: a service never does, on behalf of a user or not."""
        return self.scope == "user"

    def acting_for(self, user_id: str) -> Principal:
        """This service acting on behalf of `user_id`, if its token carries the capability."""
        if self.scope != "service" or not self.on_behalf:
            raise PermissionDenied("this token may not act on behalf of a user")
        if not _valid_subject(user_id):
            raise InvalidArgument(f"{ON_BEHALF_METADATA} must name a user")
        return replace(self, user_id=user_id)

    def remaining_s(self, now: float | None = None) -> float:
        return self.exp - (time.time() if now is None else now)


def issue_token(
    secret: str,
    user_id: str,
    *,
    ttl_s: float = 3600,
    scope: Scope = "user",
    run_id: str = "",
    on_behalf: bool = False,
) -> str:
    """A dev-issuer token (HS256 with `TETHER_JWT_SECRET`): `tether dev`, `tether token`, tests."""
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
    if on_behalf:
        claims["on_behalf"] = True
    return jwt.encode(claims, secret, algorithm=DEV_ALGORITHM)


def verify_token(secret: str, token: str, *, leeway_s: float = DEFAULT_LEEWAY_S) -> Principal:
    """A dev-issuer token, checked synchronously, nothing remembered (the CLI and tests).
    Services verify with a `TokenVerifier`."""
    return _dev_principal(_dev_claims(secret, token, leeway_s))


def bearer_from_header(value: str | None) -> str:
    if not value:
        raise Unauthenticated("missing bearer token")
    kind, _, token = value.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise Unauthenticated("missing bearer token")
    return token.strip()


@dataclass(frozen=True)
class _Verified:
    principal: Principal
    kid: str | None  # the OIDC key that signed it; None for the dev issuer


class TokenVerifier:
    """Who a bearer token names. One per process: it holds the issuer's keys and the tokens it
    already verified. Every failure is UNAUTHENTICATED without saying which check failed.

    `is_revoked` is the revocation hook: called with every principal, remembered or not, before
    it is returned; True refuses the token."""

    def __init__(
        self,
        *,
        dev_secret: str = "",
        oidc: OidcIssuer | None = None,
        leeway_s: float = DEFAULT_LEEWAY_S,
        is_revoked: Callable[[Principal], bool] | None = None,
        cache_size: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.dev_secret = dev_secret
        self.oidc = oidc
        self.leeway_s = leeway_s
        self.is_revoked = is_revoked
        self._clock = clock
        # Every RPC and request carries the same few tokens, and a signature check + JSON decode
        # each time is measurable (`make bench`): successes are kept until the token expires.
        self._verified: dict[str, _Verified] = {}
        self._cache_size = cache_size

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenVerifier:
        oidc = None
        if settings.oidc_issuer:
            keys = IssuerKeys(
                settings.oidc_issuer,
                jwks_url=settings.oidc_jwks_url,
                ttl_s=settings.oidc_jwks_ttl_s,
                refetch_s=settings.oidc_jwks_refetch_s,
            )
            oidc = OidcIssuer(keys, settings.oidc_audience, settings.jwt_leeway_s)
        return cls(dev_secret=settings.jwt_secret, oidc=oidc, leeway_s=settings.jwt_leeway_s)

    async def verify(self, token: str) -> Principal:
        verified = self._verified.get(token)
        if verified is None or not await self._still_valid(verified):
            verified = await self._verify(token)
            if self._clock() < verified.principal.exp:
                if len(self._verified) >= self._cache_size:
                    self._verified.clear()
                self._verified[token] = verified
        principal = verified.principal
        if self.is_revoked is not None and self.is_revoked(principal):
            raise Unauthenticated("token revoked")
        return principal

    async def _still_valid(self, verified: _Verified) -> bool:
        """A remembered token, until its `exp` (the leeway past it is for a fresh check only) and
        while the issuer still lists the key that signed it."""
        if self._clock() >= verified.principal.exp:
            return False
        if verified.kid is None:
            return True
        return self.oidc is not None and await self.oidc.keys.still_lists(verified.kid)

    async def _verify(self, token: str) -> _Verified:
        header = token_header(token)
        if header.alg == DEV_ALGORITHM and self.dev_secret:
            return _Verified(
                _dev_principal(_dev_claims(self.dev_secret, token, self.leeway_s)), None
            )
        if header.alg in ASYMMETRIC_ALGORITHMS and self.oidc is not None:
            claims, kid = await self.oidc.claims(token, header)
            return _Verified(_oidc_principal(claims), kid)
        raise Unauthenticated("invalid token")

    async def aclose(self) -> None:
        if self.oidc is not None:
            await self.oidc.keys.aclose()


def _dev_claims(secret: str, token: str, leeway_s: float) -> dict[str, Any]:
    # A token carrying `aud` (an OIDC or a gateway stream token) is refused: no audience is
    # expected here, so PyJWT rejects one.
    try:
        return jwt.decode(
            token,
            secret,
            algorithms=[DEV_ALGORITHM],
            leeway=leeway_s,
            options={"require": ["sub", "exp"]},
        )
    except jwt.ExpiredSignatureError as err:
        raise Unauthenticated("token expired") from err
    except jwt.PyJWTError as err:
        raise Unauthenticated("invalid token") from err


def _dev_principal(claims: Mapping[str, Any]) -> Principal:
    sub, exp, jti = _subject(claims), _expiry(claims), _token_id(claims)
    scope = claims.get("scope", "user")
    if scope not in ("user", "stream", "service"):
        raise Unauthenticated("invalid token")
    if scope == "stream":
        run_id = claims.get("run")
        if not isinstance(run_id, str):
            raise Unauthenticated("invalid token")
        return Principal(sub, "stream", run_id=run_id, jti=jti, exp=exp)
    if scope == "service":
        on_behalf = claims.get("on_behalf") is True
        return Principal(sub, "service", jti=jti, exp=exp, service=sub, on_behalf=on_behalf)
    return Principal(sub, "user", jti=jti, exp=exp)


def _oidc_principal(claims: Mapping[str, Any]) -> Principal:
    """A user unless the token carries the service scope; never a stream (those are Tether's)."""
    sub, exp, jti = _subject(claims), _expiry(claims), _token_id(claims)
    scopes = _scopes(claims)
    if SERVICE_SCOPE in scopes:
        on_behalf = ON_BEHALF_SCOPE in scopes
        return Principal(sub, "service", jti=jti, exp=exp, service=sub, on_behalf=on_behalf)
    return Principal(sub, "user", jti=jti, exp=exp)


def _scopes(claims: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            out.update(value.split())
        elif isinstance(value, list):
            out.update(v for v in value if isinstance(v, str))
    return out


def _valid_subject(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SUBJECT_CHARS
        and value.isprintable()
        and value == value.strip()
    )


def _subject(claims: Mapping[str, Any]) -> str:
    sub = claims.get("sub")
    if not _valid_subject(sub):
        raise Unauthenticated("invalid token")
    assert isinstance(sub, str)
    return sub


def _expiry(claims: Mapping[str, Any]) -> float:
    return claim_time(claims, "exp")


def _token_id(claims: Mapping[str, Any]) -> str:
    jti = claims.get("jti", "")
    return jti if isinstance(jti, str) else ""
