"""Who is calling: a bearer header, an HttpOnly session cookie, or a stream token for one run;
and until when (the token's expiry, or its revocation, ends what it opened)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from tether_common.auth import Principal, TokenVerifier, bearer_from_header
from tether_common.errors import Unauthenticated
from tether_common.revocation import Revocations

from tether_gateway import csrf
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
    # Authenticated by the session cookie: a state-changing request also needs CSRF checks.
    via_cookie: bool = False

    @property
    def jtis(self) -> tuple[str, ...]:
        """The token ids whose revocation ends this caller's authorisation."""
        return tuple(j for j in (self.jti, self.session_jti) if j)


@dataclass(frozen=True)
class Authenticator:
    """What a gateway verifies tokens with: the user tokens' verifier (the IdP's keys, or the dev
    issuer), its own stream tokens' key and the revoked `jti`s."""

    verifier: TokenVerifier
    stream_tokens: StreamTokens
    revocations: Revocations


async def authenticate(
    request: web.Request, auth: Authenticator, *, cookie: bool = False, stream_token: bool = False
) -> Caller:
    """The caller of this request. Cookies are only honoured where `cookie` (a state-changing
    route then checks CSRF: `session_or_bearer`), `?token=` only where `stream_token`, and a
    stream token never acts."""
    header = request.headers.get("Authorization")
    in_url = via_cookie = False
    if header:
        token = bearer_from_header(header)
    elif stream_token and request.query.get("token"):
        token, in_url = request.query["token"], True
    elif cookie and request.cookies.get(SESSION_COOKIE):
        token, via_cookie = request.cookies[SESSION_COOKIE], True
    else:
        raise Unauthenticated("missing bearer token")
    # Only the events route looks for a stream token; anywhere else one fails as any token
    # signed with a key the user tokens' verifier does not know.
    if stream_token and is_stream_token(token):
        caller = _stream_caller(auth.stream_tokens, token)
    else:
        caller = await _user_caller(auth.verifier, token, via_cookie)
    if in_url and caller.principal.scope != "stream":
        # URLs end up in logs and histories: only a short-lived, one-run token may travel there.
        raise Unauthenticated("only a stream token may be passed in the URL")
    if any(auth.revocations.is_revoked(jti) for jti in caller.jtis):
        raise Unauthenticated("token revoked")
    return caller


async def session_or_bearer(request: web.Request, auth: Authenticator) -> Caller:
    """A bearer header, or the session cookie: for a state-changing method only with the CSRF
    token and from this origin (csrf.py), checked before anything is changed."""
    caller = await authenticate(request, auth, cookie=True)
    if caller.via_cookie and request.method not in ("GET", "HEAD", "OPTIONS"):
        csrf.check(request, caller.token)
    return caller


def _stream_caller(tokens: StreamTokens, token: str) -> Caller:
    grant = tokens.verify(token)
    principal = Principal(user_id=grant.user_id, scope="stream", run_id=grant.run_id)
    return Caller(
        principal, token, OnBehalf(grant.user_id), grant.expires_at, grant.jti, grant.session_jti
    )


async def _user_caller(verifier: TokenVerifier, token: str, via_cookie: bool) -> Caller:
    principal = await verifier.verify(token)
    if principal.scope == "stream":
        # Stream tokens are the gateways' own (stream_tokens.py), never the user issuer's.
        raise Unauthenticated("a stream token only reads its run's events")
    return Caller(principal, token, token, principal.exp, principal.jti, via_cookie=via_cookie)
