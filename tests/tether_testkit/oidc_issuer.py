"""A real OIDC issuer run by a test: an aiohttp server on its own thread (so sync fixtures and any
event loop can use it) that serves the discovery document and a JWKS, holds key pairs made with
`cryptography`, mints tokens, and rotates keys while Tether's processes keep running.

    with TestIssuer() as idp:
        env = {**base_env, **idp.env()}          # TETHER_OIDC_ISSUER / _AUDIENCE for a process
        token = idp.token("alice")               # RS256, signed with the newest key
        new_kid = idp.rotate()                   # publish a new key, keep the old one listed
        other = idp.publish(publish_alg=False)   # list a key (without `alg`) that does not sign
        idp.withdraw(old_kid)                    # the JWKS no longer lists it
        idp.add_client("gateway", "s3cret", on_behalf=True)  # POST {issuer}/token gives it a
                                                 # service token (client-credentials grant)
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from tether_testkit.processes import free_port

AUDIENCE = "tether-api"


@dataclass(frozen=True)
class KeyPair:
    kid: str
    alg: str
    private: PrivateKeyTypes
    public: PublicKeyTypes
    # Whether the JWKS names the key's `alg` (optional, RFC 7517 section 4.4; Entra ID leaves
    # it out).
    publish_alg: bool = True

    def jwk(self) -> dict[str, Any]:
        algo = jwt.get_algorithm_by_name(self.alg)
        jwk: dict[str, Any] = json.loads(algo.to_jwk(self.public))
        pinned = {"alg": self.alg} if self.publish_alg else {}
        return {**jwk, "kid": self.kid, **pinned, "use": "sig"}


def new_key(alg: str = "RS256", *, publish_alg: bool = True) -> KeyPair:
    private: PrivateKeyTypes
    if alg.startswith(("RS", "PS")):
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(f"no test key for {alg}")
    return KeyPair(f"k-{uuid.uuid4().hex[:8]}", alg, private, private.public_key(), publish_alg)


@dataclass
class TestIssuer:
    """Issuer URL http://127.0.0.1:PORT/realm (a path, as Keycloak's and Auth0's have)."""

    __test__ = False  # not a pytest test class

    audience: str = AUDIENCE
    port: int = field(default_factory=free_port)
    keys: dict[str, KeyPair] = field(default_factory=dict)  # every key made, listed or not
    listed: list[str] = field(default_factory=list)  # the kids the JWKS publishes, oldest first
    # OAuth2 clients for the client-credentials grant: id -> (secret, scope of their tokens).
    clients: dict[str, tuple[str, str]] = field(default_factory=dict)
    client_token_ttl_s: float = 300
    jwks_requests: int = 0
    discovery_requests: int = 0
    token_requests: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}/realm"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    def env(self, *, discovery: bool = True) -> dict[str, str]:
        """Settings for a Tether process trusting this issuer (`discovery=False`: the JWKS URL
        given directly)."""
        out = {"TETHER_OIDC_ISSUER": self.issuer, "TETHER_OIDC_AUDIENCE": self.audience}
        if not discovery:
            out["TETHER_OIDC_JWKS_URL"] = self.jwks_url
        return out

    # -- keys --

    def rotate(self, alg: str = "RS256") -> str:
        """Publish a new key (it signs from now on); the old ones stay listed until withdrawn."""
        key = new_key(alg)
        self.keys[key.kid] = key
        self.listed = [*self.listed, key.kid]
        return key.kid

    def publish(self, alg: str = "RS256", *, publish_alg: bool = True) -> str:
        """List one more key that does not sign: the current key stays the newest."""
        key = new_key(alg, publish_alg=publish_alg)
        self.keys[key.kid] = key
        self.listed = [key.kid, *self.listed]
        return key.kid

    def withdraw(self, kid: str) -> None:
        self.listed = [k for k in self.listed if k != kid]

    def add_client(self, client_id: str, secret: str, *, on_behalf: bool = False) -> None:
        """A service that gets its token from `{issuer}/token` (client-credentials grant)."""
        scope = "tether.service tether.on_behalf" if on_behalf else "tether.service"
        self.clients[client_id] = (secret, scope)

    @property
    def current_kid(self) -> str:
        return self.listed[-1]

    # -- tokens --

    def claims(
        self, sub: str, *, ttl_s: float = 300, scope: str = "", **extra: Any
    ) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": sub,
            "iat": now,
            "exp": now + int(ttl_s),
            "jti": uuid.uuid4().hex,
        }
        if scope:
            claims["scope"] = scope
        return {**claims, **extra}

    def sign(self, claims: dict[str, Any], *, kid: str = "", claimed_kid: str = "") -> str:
        """Signed with key `kid` (the newest by default); `claimed_kid` puts another key id in
        the header (a made-up one, as an attacker would)."""
        key = self.keys[kid or self.current_kid]
        return jwt.encode(
            claims,
            key.private,  # type: ignore[arg-type]
            algorithm=key.alg,
            headers={"kid": claimed_kid or key.kid},
        )

    def token(
        self, sub: str, *, kid: str = "", ttl_s: float = 300, scope: str = "", **extra: Any
    ) -> str:
        """A token this issuer would give `sub`; `extra` claims override (iss=, aud=, exp=...)."""
        return self.sign(self.claims(sub, ttl_s=ttl_s, scope=scope, **extra), kid=kid)

    def service_token(self, name: str, *, on_behalf: bool = False, ttl_s: float = 300) -> str:
        scope = "tether.service tether.on_behalf" if on_behalf else "tether.service"
        return self.token(name, ttl_s=ttl_s, scope=scope)

    # -- the server --

    def _app(self) -> web.Application:
        async def discovery(_: web.Request) -> web.Response:
            self.discovery_requests += 1
            return web.json_response(
                {
                    "issuer": self.issuer,
                    "jwks_uri": self.jwks_url,
                    "token_endpoint": f"{self.issuer}/token",
                    "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                }
            )

        async def jwks(_: web.Request) -> web.Response:
            self.jwks_requests += 1
            return web.json_response({"keys": [self.keys[k].jwk() for k in list(self.listed)]})

        async def token(request: web.Request) -> web.Response:
            """RFC 6749 section 4.4, client_secret_basic or client_secret_post."""
            self.token_requests += 1
            form = await request.post()
            client_id, secret = str(form.get("client_id", "")), str(form.get("client_secret", ""))
            auth = request.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                pair = base64.b64decode(auth[len("Basic ") :]).decode()
                login, _, password = pair.partition(":")
                client_id, secret = unquote(login), unquote(password)
            known = self.clients.get(client_id)
            if form.get("grant_type") != "client_credentials":
                return web.json_response({"error": "unsupported_grant_type"}, status=400)
            if known is None or not hmac.compare_digest(known[0], secret):
                return web.json_response({"error": "invalid_client"}, status=401)
            ttl = self.client_token_ttl_s
            access = self.token(client_id, ttl_s=ttl, scope=known[1])
            return web.json_response(
                {"access_token": access, "token_type": "Bearer", "expires_in": int(ttl)}
            )

        app = web.Application()
        app.router.add_get("/realm/.well-known/openid-configuration", discovery)
        app.router.add_get("/realm/jwks", jwks)
        app.router.add_post("/realm/token", token)
        return app

    def start(self) -> TestIssuer:
        if not self.listed:
            self.rotate()
        loop = asyncio.new_event_loop()
        started = threading.Event()

        async def serve() -> None:
            self._runner = web.AppRunner(self._app(), access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
            started.set()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(serve())
            loop.run_forever()

        self._loop, self._thread = (
            loop,
            threading.Thread(target=run, name="oidc-issuer", daemon=True),
        )
        self._thread.start()
        if not started.wait(10):
            raise TimeoutError("the test OIDC issuer did not start")
        return self

    def stop(self) -> None:
        loop, runner = self._loop, self._runner
        if loop is None or self._thread is None:
            return
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> TestIssuer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
