"""`tether erase-user USER`: an operator erases a user (a right-to-erasure request), straight in
the database (as `tether grants`): every conversation of theirs and everything of it, every row
naming them (their grants and idempotency keys included), in one transaction; the audit records
stay, their content masked and the user's id replaced by a pseudonym. Refused, changing nothing,
while a worker executes one of their runs (cancel it, then erase)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from tether_common.config import Settings


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser(
        "erase-user",
        help="delete everything of a user (conversations, runs, events, ...); mask their audit",
        description="Deletes the user's conversations, messages, runs, events, tool calls, "
        "interrupts, checkpoints (LangGraph's too), idempotency keys, webhook deliveries and "
        "grants; their audit records stay with the content masked. Prints what was deleted as "
        "JSON.",
    )
    p.add_argument("user", metavar="USER")
    p.add_argument("--yes", action="store_true", help="required: erasure cannot be undone")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """0 erased; 2 bad input or refused (a run still running)."""
    if not args.yes:
        print("tether erase-user: erasure cannot be undone; pass --yes", file=sys.stderr)
        return 2
    return asyncio.run(_erase(settings.database_url, args.user, settings.db_pooler))


async def _erase(dsn: str, user: str, pooler: str = "none") -> int:
    from tether_common.errors import TetherError
    from tether_runtime.api import admin

    try:
        erased = await admin.erase_user(dsn, user, pooler=pooler)
    except TetherError as err:
        print(f"tether erase-user: {err.message}", file=sys.stderr)
        return 2
    summary = {
        "user": user,
        "conversations": len(erased.conversations),
        "runs": len(erased.runs),
        "rowsDeleted": erased.rows,
        "auditRecordsMasked": erased.audit_masked,
    }
    print(json.dumps(summary, sort_keys=True))
    return 0
