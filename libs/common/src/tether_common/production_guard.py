"""The production guard: every reason a configuration would break a guarantee in production
(invariant 8), and the refusal to start on any of them."""

from __future__ import annotations

from typing import Literal, Protocol

from tether_common.errors import UnsafeSettings
from tether_common.known_secrets import is_committed


class Settings(Protocol):
    """The settings the guard reads (tether_common.config.Settings has them all)."""

    @property
    def env(self) -> str: ...
    @property
    def embedded_stores(self) -> bool: ...
    @property
    def redis_url(self) -> str: ...
    @property
    def database_url(self) -> str: ...
    @property
    def jwt_secret(self) -> str: ...
    @property
    def oidc_issuer(self) -> str: ...
    @property
    def oidc_audience(self) -> str: ...
    @property
    def oidc_jwks_url(self) -> str: ...
    @property
    def dev_login(self) -> bool: ...


# What a process is, for the production guard: each is refused only what it would use.
Component = Literal["runtime", "gateway"]
# The settings that hold a key able to sign tokens (the names of later ones are looked up, so a
# key added to Settings is checked against the repository's committed values too).
SIGNING_KEYS = (
    ("TETHER_JWT_SECRET", "jwt_secret"),
    ("TETHER_STREAM_TOKEN_SECRET", "stream_token_secret"),
    ("TETHER_OIDC_CLIENT_SECRET", "oidc_client_secret"),
)


def problems(settings: Settings, component: Component = "runtime") -> list[str]:
    """Every reason this configuration would break a guarantee in production, for this
    component (a gateway holds no database credentials, so none are asked of it)."""
    found: list[str] = _exposure_problems(settings)
    if settings.embedded_stores:
        found.append(
            "TETHER_EMBEDDED_STORES is set: embedded Postgres/Redis are single-process and "
            "live on one pod's disk: runs, interrupts and approvals would be lost or "
            "invisible to other pods"
        )
    if not settings.redis_url:
        found.append(
            "REDIS_URL is not set: events could not fan out across pods, so a browser "
            "connected to one gateway would never see a run executing on another runtime"
        )
    found.extend(_identity_problems(settings))
    stores = [("REDIS_URL", settings.redis_url)]
    if component == "runtime":
        stores.insert(0, ("DATABASE_URL", settings.database_url))
    for name, url in stores:
        if (
            "127.0.0.1" in url
            or "localhost" in url
            or url.startswith("redis+unix")
            or ("host=/" in url)
        ):
            found.append(
                f"{name} points at this machine (or is unset and defaults to it): other pods "
                "cannot share it, so a run paused on one pod could not be resumed on another"
            )
    return found


def check(settings: Settings, component: Component = "runtime") -> None:
    """Refuse to start in production on unsafe settings (invariant 8)."""
    if settings.env != "production":
        return
    found = problems(settings, component)
    if found:
        raise UnsafeSettings(
            "refusing to start with TETHER_ENV=production, because:\n"
            + "".join(f"  - {p}\n" for p in found)
            + "Fix these settings, or unset TETHER_ENV for a development run."
        )


def _identity_problems(settings: Settings) -> list[str]:
    """Production verifies tokens from the company's IdP and holds no key that mints one."""
    found: list[str] = []
    if settings.jwt_secret:
        found.append(
            "TETHER_JWT_SECRET is set: a pod holding the dev issuer's key could mint any "
            "user's token and approve another person's actions; production accepts only "
            "tokens from the OIDC issuer (TETHER_OIDC_ISSUER): unset TETHER_JWT_SECRET"
        )
    if not settings.oidc_issuer:
        found.append(
            "TETHER_OIDC_ISSUER is not set: no token could be verified (production accepts "
            "only tokens from the company's identity provider)"
        )
    elif not settings.oidc_issuer.startswith("https://"):
        found.append(
            "TETHER_OIDC_ISSUER is not an https URL: its signing keys could be swapped in "
            "transit and any token forged"
        )
    if not settings.oidc_audience:
        found.append(
            "TETHER_OIDC_AUDIENCE is not set: a token the issuer minted for another "
            "application would be accepted here"
        )
    if settings.oidc_jwks_url and not settings.oidc_jwks_url.startswith("https://"):
        found.append(
            "TETHER_OIDC_JWKS_URL is not an https URL: its signing keys could be swapped in "
            "transit and any token forged"
        )
    return found


def _exposure_problems(settings: Settings) -> list[str]:
    """Production refusals about what a pod exposes: the dev login route, a committed key."""
    found: list[str] = []
    if settings.dev_login:
        found.append(
            "TETHER_DEV_LOGIN is set: the gateway would serve POST /v1/dev/token, which mints a "
            "token for any user name to anyone who asks"
        )
    for name, attribute in SIGNING_KEYS:
        value = getattr(settings, attribute, "")
        if isinstance(value, str) and is_committed(value):
            found.append(
                f"{name} is a value committed to Tether's repository (a dev, test or example "
                "key): anyone with a clone could mint tokens with it"
            )
    return found
