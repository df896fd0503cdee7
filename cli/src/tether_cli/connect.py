"""Where the gateway is and who the caller is, for the verbs that speak its HTTP API (`tether chat`,
`tether runs`): --url / TETHER_URL, and --token / TETHER_TOKEN or --user (a dev token signed with
TETHER_JWT_SECRET, as `tether token` prints)."""

from __future__ import annotations

import argparse
import os

from tether_common.auth import issue_token
from tether_common.config import Settings

DEFAULT_URL = "http://127.0.0.1:8080"
USER_TOKEN_TTL_S = 12 * 3600.0


class NoCredentials(Exception):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("TETHER_URL") or DEFAULT_URL,
        help=f"the gateway (default: TETHER_URL, else {DEFAULT_URL})",
    )
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--token", help="a bearer token (default: TETHER_TOKEN)")
    who.add_argument(
        "--user",
        help="act as this user with a token signed here with TETHER_JWT_SECRET (dev: its dev "
        "value); the gateway must share the secret",
    )


def bearer(args: argparse.Namespace, settings: Settings) -> str:
    if args.token:
        return str(args.token)
    if args.user:
        if not settings.jwt_secret:
            raise NoCredentials("--user needs TETHER_JWT_SECRET to sign a token")
        return issue_token(settings.jwt_secret, args.user, ttl_s=USER_TOKEN_TTL_S)
    token = os.environ.get("TETHER_TOKEN", "")
    if not token:
        raise NoCredentials(
            "who are you? give --token TOKEN, set TETHER_TOKEN, or --user NAME (a dev token "
            "signed with TETHER_JWT_SECRET)"
        )
    return token
