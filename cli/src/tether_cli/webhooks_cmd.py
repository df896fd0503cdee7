"""`tether webhooks add|list|remove|deliveries`: an operator's endpoints and the state of their
deliveries, straight in the database (as `tether grants`). A secret is read from a file, stored,
and never printed."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tether_common.config import Settings

OUTBOX_EVENTS = ("interrupt.raised", "interrupt.resolved", "run.completed", "run.failed")
STATUSES = ("pending", "delivered", "dead")


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hooks = verbs.add_parser(
        "webhooks",
        help="add, list or remove webhook endpoints; see their deliveries (pending, dead, ...)",
        description="Endpoints receive signed JSON (Tether-Signature: t=...,v1=HMAC-SHA256 of "
        "'{t}.{body}') for the events they name, at least once, deduplicable by Tether-Event-Id. "
        "docs/webhooks.md shows a receiver.",
    )
    ops = hooks.add_subparsers(dest="op", required=True, metavar="OP")
    add = ops.add_parser("add", help="send these events to URL, signed with the secret in a file")
    add.add_argument("url", metavar="URL")
    add.add_argument(
        "--events",
        default=",".join(OUTBOX_EVENTS),
        help=f"comma-separated, of {', '.join(OUTBOX_EVENTS)} (default: all)",
    )
    add.add_argument(
        "--secret-file",
        required=True,
        help="a file holding the signing secret (at least 16 characters; never printed)",
    )
    ops.add_parser(
        "list", help="the endpoints, with how many deliveries are pending/delivered/dead"
    )
    rm = ops.add_parser("remove", help="remove an endpoint (its pending deliveries with it)")
    rm.add_argument("endpoint_id", metavar="ENDPOINT_ID")
    rd = ops.add_parser(
        "redeliver", help="try an endpoint's dead deliveries again (same event ids), from now"
    )
    rd.add_argument("endpoint_id", metavar="ENDPOINT_ID")
    dl = ops.add_parser("deliveries", help="recent deliveries, newest first")
    dl.add_argument("--endpoint", metavar="ENDPOINT_ID", help="only this endpoint's")
    dl.add_argument("--status", choices=STATUSES, help="only in this status (dead: gave up)")
    dl.add_argument("--limit", type=int, default=50, help="at most this many (1-1000, 50)")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """0 done; 1 nothing to remove; 2 bad input."""
    from tether_runtime.api import admin

    if args.op == "add":
        try:
            secret = Path(args.secret_file).read_text().strip()
        except OSError as err:
            print(
                f"tether webhooks add: cannot read --secret-file: {err.strerror}", file=sys.stderr
            )
            return 2
        events = [e.strip() for e in args.events.split(",") if e.strip()]
        try:
            admin.check_endpoint(args.url, events, secret)
        except admin.InvalidEndpoint as err:
            print(f"tether webhooks add: {err}", file=sys.stderr)
            return 2
        return asyncio.run(_add(settings.database_url, args.url, events, secret))
    if args.op == "deliveries" and not 1 <= args.limit <= 1000:
        print("tether webhooks deliveries: --limit must be 1-1000", file=sys.stderr)
        return 2
    return asyncio.run(_read(settings.database_url, args))


async def _add(dsn: str, url: str, events: list[str], secret: str) -> int:
    from tether_runtime.api import admin

    endpoint_id = await admin.add_endpoint(dsn, url, events, secret)
    print(f"added {endpoint_id}: {url} receives {', '.join(sorted(set(events)))}")
    return 0


async def _read(dsn: str, args: argparse.Namespace) -> int:
    from tether_runtime.api import admin

    from tether_cli.commands import _table

    if args.op == "list":
        rows = await admin.list_endpoints(dsn)
        print(
            _table(
                ["ID", "URL", "EVENTS", "PENDING", "DELIVERED", "DEAD"],
                [
                    [e.id, e.url, ",".join(e.events), str(e.pending), str(e.delivered), str(e.dead)]
                    for e in rows
                ],
            )
        )
        return 0
    if args.op == "remove":
        if await admin.remove_endpoint(dsn, args.endpoint_id):
            print(f"removed {args.endpoint_id}")
            return 0
        print(f"tether webhooks remove: no endpoint {args.endpoint_id}", file=sys.stderr)
        return 1
    if args.op == "redeliver":
        n = await admin.redeliver_dead(dsn, args.endpoint_id)
        print(f"{n} dead deliveries of {args.endpoint_id} are due again")
        return 0
    found = await admin.deliveries(
        dsn, endpoint_id=args.endpoint, status=args.status, limit=args.limit
    )
    print(
        _table(
            ["EVENT", "TYPE", "ENDPOINT", "STATUS", "ATTEMPTS", "LAST", "NEXT/DELIVERED"],
            [
                [
                    d.event_id,
                    d.event_type,
                    d.endpoint_id,
                    d.status,
                    str(d.attempts),
                    d.last_error or (str(d.last_status_code or "") if d.attempts else ""),
                    (d.delivered_at or d.next_attempt_at).isoformat(timespec="seconds")
                    if d.status != "dead"
                    else "-",
                ]
                for d in found
            ],
        )
    )
    return 0
