"""Who is calling: the principal a call's bearer token names, resolved once per call by the
interceptor and read by the servicer's methods through a context variable."""

from __future__ import annotations

import logging
from contextvars import ContextVar

import grpc
from tether_common.auth import ON_BEHALF_METADATA, Principal, TokenVerifier, bearer_from_header

log = logging.getLogger(__name__)

_PRINCIPAL: ContextVar[Principal] = ContextVar("tether_principal")


async def authenticate(
    verifier: TokenVerifier, metadata: grpc.aio.Metadata | tuple[()] | None, rpc: str
) -> Principal:
    """The caller; a service with the on-behalf capability may name the user it acts for
    (`x-tether-on-behalf-of`), and is then that user, still a service (it cannot approve)."""
    md = dict(metadata or ())
    principal = await verifier.verify(bearer_from_header(md.get("authorization")))
    user = md.get(ON_BEHALF_METADATA)
    if user is None:
        return principal
    acting = principal.acting_for(user)  # PERMISSION_DENIED without the capability
    log.info(
        "service acting on behalf of a user",
        extra={"caller_service": principal.service, "on_behalf_of": acting.user_id, "rpc": rpc},
    )
    return acting


def set_caller(principal: Principal) -> None:
    """Set for the rest of the call: each call runs in a task of its own, with its own context."""
    _PRINCIPAL.set(principal)


def caller() -> Principal:
    """The authenticated caller of the current call (LookupError outside one)."""
    return _PRINCIPAL.get()
