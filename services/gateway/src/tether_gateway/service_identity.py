"""The gateway's own identity towards the runtime, for what it does on a user's behalf: a stream
opened with a stream token (which only gateways can verify) reaches the runtime as this service
plus `x-tether-on-behalf-of: <user>`; the runtime checks the capability and logs it.

In production the token comes from the company's identity provider by the OAuth2
client-credentials grant (TETHER_OIDC_CLIENT_ID / _SECRET at the issuer's token_endpoint),
cached until shortly before it expires. In dev the gateway mints it with the dev issuer's key."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp
import jwt
from tether_common.config import Settings
from tether_common.errors import Unavailable

log = logging.getLogger(__name__)

ON_BEHALF_HEADER = "x-tether-on-behalf-of"
SERVICE_SUBJECT = "tether-gateway"
# Scopes the contract gives a service principal and its on-behalf capability.
SERVICE_SCOPES = "tether.service tether.on_behalf"
DEV_TOKEN_TTL_S = 300
REFRESH_BEFORE_S = 60.0
_HTTP_TIMEOUT = aiohttp.ClientTimeout(total=5.0)


@dataclass(frozen=True)
class OnBehalf:
    """A runtime call made by the gateway's service identity for `user_id`."""

    user_id: str


class ServiceIdentity(Protocol):
    async def token(self) -> str:
        """A current service token (cached; refreshed shortly before it expires)."""

    async def close(self) -> None: ...


class DevServiceIdentity:
    """`tether dev` and tests: a short-lived dev service token with the on-behalf capability."""

    def __init__(self, jwt_secret: str, ttl_s: int = DEV_TOKEN_TTL_S) -> None:
        self._secret = jwt_secret
        self._ttl_s = ttl_s
        self._token = ""
        self._refresh_at = 0.0

    async def token(self) -> str:
        now = time.time()
        if not self._token or now >= self._refresh_at:
            claims = {
                "sub": SERVICE_SUBJECT,
                "scope": "service",
                "on_behalf": True,
                "jti": uuid.uuid4().hex,
                "iat": int(now),
                "exp": int(now) + self._ttl_s,
            }
            self._token = jwt.encode(claims, self._secret, algorithm="HS256")
            self._refresh_at = now + max(1.0, self._ttl_s - REFRESH_BEFORE_S)
        return self._token

    async def close(self) -> None:
        return None


class ClientCredentialsIdentity:
    """OAuth2 client credentials at the issuer's token endpoint (found by OIDC discovery)."""

    def __init__(self, issuer: str, client_id: str, client_secret: str) -> None:
        self._issuer = issuer.rstrip("/")
        self._client_id = client_id
        self._client_secret = client_secret
        self._endpoint = ""
        self._token = ""
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None

    async def token(self) -> str:
        if self._token and time.monotonic() < self._refresh_at:
            return self._token
        async with self._lock:  # one grant at a time, however many streams open at once
            if self._token and time.monotonic() < self._refresh_at:
                return self._token
            try:
                await self._grant()
            except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as err:
                log.warning("service token grant failed: %s", type(err).__name__)
                raise Unavailable("the gateway's service identity is unavailable") from err
        return self._token

    async def _grant(self) -> None:
        session = self._session_open()
        if not self._endpoint:
            url = f"{self._issuer}/.well-known/openid-configuration"
            async with session.get(url) as resp:
                resp.raise_for_status()
                endpoint = (await resp.json())["token_endpoint"]
            if not isinstance(endpoint, str) or not endpoint.startswith(("https://", "http://")):
                raise ValueError("the issuer's discovery document names no token_endpoint")
            self._endpoint = endpoint
        form = {"grant_type": "client_credentials", "scope": SERVICE_SCOPES}
        # client_secret_basic (RFC 6749 2.3.1): the default every identity provider accepts.
        basic = aiohttp.encode_basic_auth(self._client_id, self._client_secret)
        async with session.post(
            self._endpoint, data=form, headers={"Authorization": basic}
        ) as resp:
            resp.raise_for_status()
            body = await resp.json()
        token, expires_in = body["access_token"], float(body.get("expires_in", 300))
        if not isinstance(token, str) or not token:
            raise ValueError("the token endpoint returned no access_token")
        self._token = token
        # Refreshed a minute early, or at half its life when it lives less than two minutes.
        self._refresh_at = time.monotonic() + max(
            expires_in - REFRESH_BEFORE_S, expires_in / 2, 1.0
        )

    def _session_open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=_HTTP_TIMEOUT)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def client_secret(settings: Settings) -> str:
    if settings.oidc_client_secret_file:
        return Path(settings.oidc_client_secret_file).read_text().strip()
    return settings.oidc_client_secret


def service_identity(settings: Settings) -> ServiceIdentity | None:
    """Client credentials when configured; else, outside production, the dev issuer; else None
    (streams opened with a stream token are then refused)."""
    if settings.oidc_client_id and settings.oidc_issuer:
        return ClientCredentialsIdentity(
            settings.oidc_issuer, settings.oidc_client_id, client_secret(settings)
        )
    if settings.env != "production" and settings.jwt_secret:
        return DevServiceIdentity(settings.jwt_secret)
    return None


def production_problems(settings: Settings) -> list[str]:
    if settings.oidc_client_id and settings.oidc_issuer and client_secret(settings):
        return []
    return [
        "TETHER_OIDC_CLIENT_ID / TETHER_OIDC_CLIENT_SECRET (or _FILE) and TETHER_OIDC_ISSUER are "
        "not all set: the gateway has no service identity to read a run on behalf of the user a "
        "stream token names (EventSource streams would all be refused)"
    ]
