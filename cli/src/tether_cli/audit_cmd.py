"""`tether audit export --since T [--until T] [--actor U] > audit.jsonl`: the audit log as JSON
lines, oldest first, read straight from the database in pages (an operator's command, as
`tether grants`; over HTTP, admins read `GET /v1/audit`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime

from tether_common.config import Settings

PAGE = 1000


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = verbs.add_parser("audit", help="export the audit log (decisions, write tool runs)")
    ops = audit.add_subparsers(dest="op", required=True, metavar="OP")
    export = ops.add_parser(
        "export",
        help="the records as JSON lines on stdout, oldest first",
        description="One JSON object per line: id, time, actor, action, runId, interruptId, "
        "callId, tool, permission, scope, decision, outcome, approver, idempotencyKey, "
        "clientAddress, pod, traceId, details.",
    )
    export.add_argument("--since", required=True, help="from this time (ISO 8601, e.g. 2026-01-31)")
    export.add_argument("--until", help="before this time (default: now)")
    export.add_argument(
        "--actor", default="", help="only records where this user acted or approved"
    )


def _time(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when


def run(settings: Settings, args: argparse.Namespace) -> int:
    """0 exported (perhaps nothing); 2 bad input."""
    try:
        since = _time(args.since)
        until = _time(args.until)
    except ValueError as err:
        print(f"tether audit export: not an ISO 8601 time: {err}", file=sys.stderr)
        return 2
    if since is not None and until is not None and until < since:
        print("tether audit export: --until is before --since", file=sys.stderr)
        return 2
    count = asyncio.run(_export(settings.database_url, since, until, args.actor))
    print(f"exported {count} audit record(s)", file=sys.stderr)
    return 0


async def _export(dsn: str, since: datetime | None, until: datetime | None, actor: str) -> int:
    from tether_runtime.api import admin

    count = 0
    async for rows in admin.audit_records(dsn, since=since, until=until, actor=actor, page=PAGE):
        for r in rows:
            sys.stdout.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
        count += len(rows)
    return count
