"""Tokens from the company's OIDC issuer: its signing keys (discovery, then the JWKS), fetched
without blocking the event loop, cached for a TTL, and refetched once when a token names a key id
the cache does not hold (key rotation), at most once per `refetch_s` so that tokens with made-up
key ids cannot make every pod hammer the identity provider."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from tether_common.errors import Unauthenticated, Unavailable
from tether_common.input_parsers import TokenHeader

log = logging.getLogger(__name__)

# Only public-key signatures: a verifier that can check an IdP's token can never mint one. HS*
# (a shared secret) and "none" are refused whatever the token's header or the JWKS says.
ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
_PUBLIC_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})  # never "oct" (a symmetric key)
MAX_DOCUMENT_BYTES = 512 * 1024
DISCOVERY_PATH = "/.well-known/openid-configuration"


class IdpUnreachable(Exception):
    """The discovery document or the JWKS could not be fetched or read."""


@dataclass(frozen=True)
class SigningKey:
    kid: str
    key: Any  # a `cryptography` public key
    alg: str | None  # the algorithm the JWKS pins this key to, if it does


# The key type each algorithm family verifies with (RFC 7518 section 3.1; RFC 8037 for EdDSA).
_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "RS": (rsa.RSAPublicKey,),
    "PS": (rsa.RSAPublicKey,),
    "ES": (ec.EllipticCurvePublicKey,),
    "Ed": (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey),
}


def key_fits(alg: str, key: object) -> bool:
    """Whether a public key's type is the one `alg` verifies with (an RSA key for RS256, an EC
    key for ES256...). PyJWT checks an EC key's curve itself (InvalidKeyError)."""
    return alg in ASYMMETRIC_ALGORITHMS and isinstance(key, _KEY_TYPES[alg[:2]])


def signing_keys(jwks: Mapping[str, Any]) -> dict[str, SigningKey]:
    """The usable public signing keys of a JWKS document, by key id. Symmetric keys, encryption
    keys, keys pinned to another algorithm and keys PyJWT cannot read are left out."""
    entries = jwks.get("keys")
    if not isinstance(entries, list):
        raise IdpUnreachable("the JWKS has no `keys` list")
    out: dict[str, SigningKey] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("kty") not in _PUBLIC_KEY_TYPES:
            continue
        if entry.get("use", "sig") != "sig":
            continue
        alg = entry.get("alg")
        if alg is not None and alg not in ASYMMETRIC_ALGORITHMS:
            continue
        kid = entry.get("kid", "")
        if not isinstance(kid, str):
            continue
        try:
            key = jwt.PyJWK(entry).key
        except jwt.PyJWTError as err:
            log.warning("JWKS key %r skipped: %s", kid, err)
            continue
        out[kid] = SigningKey(kid=kid, key=key, alg=alg)
    return out


class IssuerKeys:
    """The issuer's current signing keys. One per process; `aclose()` on shutdown."""

    def __init__(
        self,
        issuer: str,
        *,
        jwks_url: str = "",
        ttl_s: float = 600.0,
        refetch_s: float = 10.0,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._jwks_url = jwks_url
        self._discovers = not jwks_url
        self._ttl_s = ttl_s
        self._refetch_s = refetch_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at = -float("inf")  # the last successful fetch
        self._tried_at = -float("inf")  # the last attempt, successful or not
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None

    async def key(self, kid: str) -> SigningKey:
        """The key a token names; an unknown id triggers one refetch (rate-limited)."""
        await self._refresh_if_stale()
        found = self._lookup(kid)
        if found is None and self._clock() - self._tried_at >= self._refetch_s:
            await self._refresh(force=False, kid=kid)
            found = self._lookup(kid)
        if found is None and not self._keys:
            raise Unavailable("the identity provider's keys are unavailable")
        if found is None:
            raise Unauthenticated("invalid token")
        return found

    async def still_lists(self, kid: str) -> bool:
        """Whether the key is still in the issuer's JWKS (as of the last fetch within the TTL):
        a remembered token signed with a key the issuer withdrew stops being accepted."""
        await self._refresh_if_stale()
        return self._lookup(kid) is not None

    def _lookup(self, kid: str) -> SigningKey | None:
        if kid:
            return self._keys.get(kid)
        # A token without `kid` is only unambiguous against a JWKS of one key.
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    async def _refresh_if_stale(self) -> None:
        now = self._clock()
        if now - self._fetched_at >= self._ttl_s and now - self._tried_at >= self._refetch_s:
            await self._refresh(force=True)

    async def _refresh(self, *, force: bool, kid: str = "") -> None:
        async with self._lock:
            # Another request may have fetched while this one waited for the lock.
            if not force and self._lookup(kid) is not None:
                return
            if self._clock() - self._tried_at < self._refetch_s:
                return
            self._tried_at = self._clock()
            try:
                keys = signing_keys(await self._get_json(await self._jwks_location()))
            except IdpUnreachable as err:
                # The keys fetched last stay in use until the next attempt: a flapping IdP does
                # not log everyone out, and only a JWKS that was read replaces them.
                log.warning("OIDC keys of %s not refreshed: %s", self.issuer, err)
                if self._discovers:
                    self._jwks_url = ""  # the next attempt reads the discovery document again
                if not self._keys:
                    raise Unavailable("the identity provider's keys are unavailable") from err
                return
            self._keys, self._fetched_at = keys, self._clock()
            log.info("OIDC keys of %s fetched", self.issuer, extra={"kids": sorted(keys)})

    async def _jwks_location(self) -> str:
        if not self._jwks_url:
            url = self.issuer.rstrip("/") + DISCOVERY_PATH
            doc = await self._get_json(url)
            # OpenID Connect Discovery 1.0, section 4.3: the document names the same issuer.
            if doc.get("issuer") != self.issuer:
                raise IdpUnreachable(f"{url} names issuer {doc.get('issuer')!r}")
            jwks_uri = doc.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
                raise IdpUnreachable(f"{url} has no jwks_uri")
            if self.issuer.startswith("https://") and not jwks_uri.startswith("https://"):
                raise IdpUnreachable(f"{url} names a jwks_uri that is not https")
            self._jwks_url = jwks_uri
        return self._jwks_url

    async def _get_json(self, url: str) -> dict[str, Any]:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s)
            )
        try:
            async with self._session.get(
                url, headers={"Accept": "application/json"}, allow_redirects=False
            ) as resp:
                if resp.status != 200:
                    raise IdpUnreachable(f"{url} answered HTTP {resp.status}")
                body = await resp.content.read(MAX_DOCUMENT_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise IdpUnreachable(f"{url}: {type(err).__name__}") from err
        if len(body) > MAX_DOCUMENT_BYTES:
            raise IdpUnreachable(f"{url} is larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            doc = json.loads(body)
        except ValueError as err:
            raise IdpUnreachable(f"{url} is not JSON") from err
        if not isinstance(doc, dict):
            raise IdpUnreachable(f"{url} is not a JSON object")
        return doc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass
class OidcIssuer:
    """Checks a token of this issuer: signature by its JWKS, `iss`, `aud`, `exp`/`nbf`/`iat`."""

    keys: IssuerKeys
    audience: str
    leeway_s: float

    @property
    def issuer(self) -> str:
        return self.keys.issuer

    async def claims(self, token: str, header: TokenHeader) -> tuple[dict[str, Any], str]:
        """The verified claims and the id of the key that signed them."""
        alg = header.alg
        if alg not in ASYMMETRIC_ALGORITHMS:
            raise Unauthenticated("invalid token")
        key = await self.keys.key(header.kid)
        # A JWKS need not pin a key's `alg` (Entra ID's does not): the token's must still fit
        # the key's type, or PyJWT is handed a key it cannot use (a TypeError, not a refusal).
        if (key.alg is not None and key.alg != alg) or not key_fits(alg, key.key):
            raise Unauthenticated("invalid token")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["sub", "exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as err:
            raise Unauthenticated("token expired") from err
        except jwt.PyJWTError as err:
            raise Unauthenticated("invalid token") from err
        return claims, key.kid
