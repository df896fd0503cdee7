"""Sessions of the runtime's own application that stall in the middle of a command, inside a
transaction, ended from another connection.

A pooled connection that goes dark between two messages of one command (a NAT forgets it, a
pod's link is cut: no FIN, no RST) leaves its Postgres session `active`, waiting on `ClientRead`
for the rest of the command: asyncpg sends Parse/Describe with a Flush and the Bind/Execute/Sync
after the answer, and a COPY streams its rows. No Postgres timeout ends that state
(`idle_in_transaction_session_timeout` counts only after a Sync; a cancel and
`statement_timeout` are not acted on while the backend reads), and a proxy in between keeps
Postgres's own TCP connection alive, so keepalives on its side never fire. The session keeps
its transaction's row locks meanwhile: a run's row stays locked, `claim` skips it, and the run
waits at its card with its approvals refused (tests/integration/chaos/test_chaos_links.py,
half-open Postgres connections; docs/DESIGN.md).

A live client never pauses inside a command: its messages are written back to back. So a
session of ours in that state for longer than the idle-in-transaction limit (a lease) is one
whose client is gone, and ending it rolls back a transaction nobody can commit. What it wrote
was never acknowledged to its client, which treats the statement as failed (an outcome it
already handles: the store's errors)."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlencode, urlsplit

import asyncpg

log = logging.getLogger(__name__)

# The name the runtime's pool and its agents' pools give their sessions unless the DSN names
# them, so that only the runtime's own sessions are ever ended: not an operator's psql.
APPLICATION_NAME = "tether-runtime"


def _given(dsn: str) -> str | None:
    names = parse_qs(urlsplit(dsn).query).get("application_name")
    return names[-1] if names else None


def session_name(dsn: str) -> str:
    """The `application_name` of the sessions opened with `named(dsn)`: the DSN's own if it gives
    one (pods that share a DSN share the name, and end each other's stalled sessions)."""
    return _given(dsn) or APPLICATION_NAME


def named(dsn: str) -> str:
    """`dsn` naming its sessions `session_name(dsn)`: what the runtime's pool connects with, and
    the DSN it gives its agents (`Host.database_url`), so that a tool's own pool stalled
    mid-command on a dead link is ended too. Its transaction holds what the tool locked
    (OpsPilot's `_once` holds the operation key's advisory lock): left alone, every later call
    under that key would wait."""
    if _given(dsn) is not None:
        return dsn
    parts = urlsplit(dsn)
    extra = urlencode({"application_name": APPLICATION_NAME})
    return parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra).geturl()


_END = """
SELECT pid, pg_terminate_backend(pid) AS ended,
       extract(epoch FROM now() - state_change)::float8 AS stalled_s, left(query, 80) AS query
FROM pg_stat_activity
WHERE application_name = $1 AND datname = current_database() AND pid <> pg_backend_pid()
  AND state = 'active' AND wait_event = 'ClientRead'
  AND state_change < now() - make_interval(secs => $2)
"""


async def end_stalled(conn: asyncpg.Connection, name: str, older_than_s: float) -> int:
    """End every session of this database named `name` (`session_name`) that has waited for its
    client in the middle of a command for more than `older_than_s`; returns how many were ended. A role may end only
    its own sessions (or needs pg_signal_backend): the runtime's sessions share one role."""
    rows = await conn.fetch(_END, name, older_than_s)
    for r in rows:
        log.warning(
            "ended a Postgres session stalled mid-command in a transaction (its client is gone)",
            extra={
                "pid": r["pid"],
                "ended": r["ended"],
                "stalled_s": round(r["stalled_s"], 1),
                "query": r["query"],
            },
        )
    return sum(1 for r in rows if r["ended"])
