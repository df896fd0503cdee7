"""`tether revoke`: an operator ends a token on every gateway pod (its open streams too), by its
`jti` or by the token itself; recorded in Redis for the token's remaining lifetime."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import jwt
from tether_common.config import Settings
from tether_common.errors import Unavailable
from tether_common.revocation import MAX_JTI_CHARS, Revocations

# Without the token, how long the entry is kept: no Tether token lives longer (dev tokens: 12 h).
DEFAULT_TTL_S = 24 * 3600.0


def add_arguments(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rev = verbs.add_parser(
        "revoke",
        help="revoke a token on every gateway pod (by its jti, or the token itself)",
        description="Every gateway refuses the token from now on and ends the streams it "
        "opened. Needs REDIS_URL (the gateways' Redis).",
    )
    which = rev.add_mutually_exclusive_group(required=True)
    which.add_argument("jti", nargs="?", metavar="JTI", help="the token's jti claim")
    which.add_argument("--token", help="the token itself (its jti and expiry are read from it)")
    rev.add_argument(
        "--ttl",
        type=float,
        default=DEFAULT_TTL_S,
        help="with a JTI: how long to keep refusing it, in seconds (86400)",
    )


def revoke(settings: Settings, args: argparse.Namespace) -> int:
    if args.token:
        try:
            claims = jwt.decode(args.token, options={"verify_signature": False})
        except jwt.PyJWTError:
            print("tether revoke: --token is not a JWT", file=sys.stderr)
            return 2
        jti, exp = claims.get("jti"), claims.get("exp")
        if not isinstance(exp, int | float):
            exp = time.time() + DEFAULT_TTL_S
    else:
        jti, exp = args.jti, time.time() + args.ttl
    if not isinstance(jti, str) or not jti or len(jti) > MAX_JTI_CHARS:
        print("tether revoke: the token has no jti: it cannot be revoked", file=sys.stderr)
        return 2
    if not settings.redis_url:
        print("tether revoke: REDIS_URL is not set", file=sys.stderr)
        return 2
    if exp <= time.time():
        print(f"tether revoke: {jti} has expired already")
        return 0
    try:
        asyncio.run(_revoke(settings.redis_url, jti, float(exp)))
    except Unavailable as err:
        print(f"tether revoke: {err.message}", file=sys.stderr)
        return 1
    print(f"revoked {jti} until {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(exp))}")
    return 0


async def _revoke(redis_url: str, jti: str, exp: float) -> None:
    from tether_common import redis_conn  # only this verb needs Redis

    redis = redis_conn.connect(redis_url, socket_connect_timeout=2.0, socket_timeout=5.0)
    try:
        await Revocations().revoke(redis, jti, exp)
    finally:
        await redis.aclose()
