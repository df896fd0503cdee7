"""CSRF protection for the browser's cookie session: a state-changing request that the HttpOnly
session cookie authenticates must come from this origin AND carry `X-CSRF-Token`, a value bound
to that session. Bearer-header callers are not concerned: a browser never attaches a header to a
cross-site request without a CORS preflight, which the gateway grants only on /langgraph, to
listed origins, without credentials (langgraph/cors.py: a bearer token there, never a cookie).

The token is HMAC-SHA256 keyed with the session token itself (the cookie's value, which no script
can read): the gateway recomputes it from the cookie on any pod, nothing is stored, it dies with
the session, and knowing it reveals nothing about the session token. A site that can plant
cookies (a sibling subdomain) gains nothing over a server-keyed HMAC: either way it could only
pair a session of its own with that session's token."""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import urlsplit

from aiohttp import web
from tether_common.errors import PermissionDenied

CSRF_HEADER = "X-CSRF-Token"
_LABEL = b"tether-csrf-v1"
# Sec-Fetch-Site values a same-origin fetch carries ("none": typed or bookmarked, never a fetch
# with a body, so refused like "same-site" and "cross-site").
_SAME_ORIGIN = "same-origin"


def csrf_token(session_token: str) -> str:
    """The X-CSRF-Token value for the session whose cookie holds `session_token`."""
    mac = hmac.new(session_token.encode(), _LABEL, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def check_origin(request: web.Request, *, required: bool = True) -> None:
    """Refuse a request a browser sent from another origin. Browsers send `Origin` on every
    POST/DELETE and `Sec-Fetch-Site` on every fetch; with neither (not a browser) the request is
    refused only when `required`."""
    site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if site is None and origin is None:
        if required:
            raise PermissionDenied(
                "a cookie session's request must name its origin (Origin or Sec-Fetch-Site)",
                reason="CSRF_ORIGIN_REFUSED",
            )
        return
    if site is not None and site != _SAME_ORIGIN:
        raise PermissionDenied(
            f"refused a {site} request: the session cookie acts only for this site's own pages",
            reason="CSRF_ORIGIN_REFUSED",
        )
    if origin is not None and not _is_this_host(origin, request.host):
        raise PermissionDenied(
            "refused a request from another origin: the session cookie acts only for this "
            "site's own pages",
            reason="CSRF_ORIGIN_REFUSED",
        )


def _is_this_host(origin: str, host: str) -> bool:
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


def check(request: web.Request, session_token: str) -> None:
    """The checks a cookie-authenticated state-changing request must pass; raises 403
    (CSRF_ORIGIN_REFUSED or CSRF_TOKEN_INVALID) before anything is changed."""
    check_origin(request)
    sent = request.headers.get(CSRF_HEADER, "")
    expected = csrf_token(session_token)
    if not sent or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise PermissionDenied(
            f"a request authenticated by the session cookie needs the {CSRF_HEADER} header "
            "(csrfToken from POST or GET /v1/session)",
            reason="CSRF_TOKEN_INVALID",
        )
