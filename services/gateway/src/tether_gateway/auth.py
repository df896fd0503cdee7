"""Who is calling: a bearer header, an HttpOnly session cookie, or a stream token for one run."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from tether_common.auth import Principal, TokenVerifier, bearer_from_header
from tether_common.errors import Unauthenticated

SESSION_COOKIE = "tether_session"
STREAM_TOKEN_TTL_S = 300.0


@dataclass(frozen=True)
class Caller:
    principal: Principal
    # Forwarded to the runtime as `authorization` metadata; the runtime checks it again.
    token: str
    # Authenticated by the session cookie: a state-changing request also needs CSRF checks.
    via_cookie: bool = False


async def authenticate(
    request: web.Request,
    verifier: TokenVerifier,
    *,
    cookie: bool = False,
    stream_token: bool = False,
) -> Caller:
    """The caller of this request. Cookies are only honoured where `cookie` (a state-changing
    route then checks CSRF: api._caller), `?token=` only where `stream_token`, and a
    stream-scoped token never acts."""
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
    principal = await verifier.verify(token)
    if principal.scope == "stream" and not stream_token:
        raise Unauthenticated("a stream token only reads its run's events")
    if in_url and principal.scope != "stream":
        # URLs end up in logs and histories: only a short-lived, one-run token may travel there.
        raise Unauthenticated("only a stream token may be passed in the URL")
    return Caller(principal=principal, token=token, via_cookie=via_cookie)
