"""Who is calling: a bearer header, an HttpOnly session cookie, or a stream token for one run;
and until when (the token's expiry, or its revocation, ends what it opened)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jwt
from aiohttp import web
from tether_common.auth import Principal, bearer_from_header, verify_token
from tether_common.errors import Unauthenticated
from tether_common.revocation import Revocations

from tether_gateway.runtime_client import Credential
from tether_gateway.service_identity import OnBehalf
from tether_gateway.stream_tokens import StreamTokens, is_stream_token

SESSION_COOKIE = "tether_session"


@dataclass(frozen=True)
class Caller:
    principal: Principal
    # The token as presented (a session is opened with it; sign-out revokes it).
    token: str
    # What the runtime calls are made with: the caller's own token, forwarded (the runtime
    # checks it again); for a stream token, which the runtime cannot verify, the gateway's
    # service identity on the user's behalf.
    credential: Credential
    expires_at: float
    jti: str = ""
    session_jti: str = ""  # a stream token's: the login it was minted with

    @property
    def jtis(self) -> tuple[str, ...]:
        """The token ids whose revocation ends this caller's authorisation."""
        return tuple(j for j in (self.jti, self.session_jti) if j)


@dataclass(frozen=True)
class Authenticator:
    """What a gateway verifies tokens with: the user tokens' verifier, its own stream tokens'
    key and the revoked `jti`s."""

    jwt_secret: str
    stream_tokens: StreamTokens
    revocations: Revocations


async def authenticate(
    request: web.Request, auth: Authenticator, *, cookie: bool = False, stream_token: bool = False
) -> Caller:
    """The caller of this request. Cookies are only honoured where `cookie` (safe GETs: no CSRF),
    `?token=` only where `stream_token`, and a stream token never acts."""
    header = request.headers.get("Authorization")
    in_url = False
    if header:
        token = bearer_from_header(header)
    elif stream_token and request.query.get("token"):
        token, in_url = request.query["token"], True
    elif cookie and request.cookies.get(SESSION_COOKIE):
        token = request.cookies[SESSION_COOKIE]
    else:
        raise Unauthenticated("missing bearer token")
    # Only the events route looks for a stream token; anywhere else one fails as any token
    # signed with a key the user tokens' verifier does not know.
    if stream_token and is_stream_token(token):
        caller = _stream_caller(auth.stream_tokens, token)
    else:
        caller = _user_caller(auth.jwt_secret, token)
    if in_url and caller.principal.scope != "stream":
        # URLs end up in logs and histories: only a short-lived, one-run token may travel there.
        raise Unauthenticated("only a stream token may be passed in the URL")
    if any(auth.revocations.is_revoked(jti) for jti in caller.jtis):
        raise Unauthenticated("token revoked")
    return caller


def _stream_caller(tokens: StreamTokens, token: str) -> Caller:
    grant = tokens.verify(token)
    principal = Principal(user_id=grant.user_id, scope="stream", run_id=grant.run_id)
    return Caller(
        principal, token, OnBehalf(grant.user_id), grant.expires_at, grant.jti, grant.session_jti
    )


def _user_caller(secret: str, token: str) -> Caller:
    principal = verify_token(secret, token)
    if principal.scope == "stream":
        # Stream tokens are the gateways' own (stream_tokens.py), never the user issuer's.
        raise Unauthenticated("a stream token only reads its run's events")
    exp, jti = token_lifetime(token)
    return Caller(principal, token, token, exp, jti)


@functools.lru_cache(maxsize=4096)  # the same few tokens come again and again (make bench)
def token_lifetime(token: str) -> tuple[float, str]:
    """(exp, jti) of a token already verified: read without checking the signature again."""
    claims = jwt.decode(token, options={"verify_signature": False})
    exp, jti = claims.get("exp"), claims.get("jti")
    return float(exp) if isinstance(exp, int | float) else 0.0, jti if isinstance(jti, str) else ""
