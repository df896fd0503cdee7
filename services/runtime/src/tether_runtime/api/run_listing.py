"""ListRuns: whose runs a caller may list, the filters (conversation, status, agent, creation
time) and AIP-158 pages whose token carries the position and is bound to the filters.

A caller lists their own runs. Another user's runs, or every user's (`user_id` "-"), take the
grant `runs.read` on `*`, read from the store at every call."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from tether_common.auth import Principal
from tether_common.errors import InvalidArgument, NotFound, PermissionDenied
from tether_common.input_parsers import encode_page_token, page_limit, page_token
from tether_proto import wire

from tether_runtime import policy
from tether_runtime.domain.views import RunView
from tether_runtime.store import event_partitions, run_pages, runs
from tether_runtime.store.db import Pool

ADMIN_ACTION = "runs.read"
ADMIN_SCOPE = "*"
EVERY_USER = "-"
RUN_STATUSES = wire.RUN_STATUS.names
MAX_FILTER = 200
DEFAULT_PAGE = 50
MAX_PAGE = 200


class Bound(Protocol):
    """What a page token is bound to: a list's filters (RunFilter, the approvals inbox's)."""

    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class RunFilter:
    user_id: str  # resolved: the caller's id, another user's, or EVERY_USER
    conversation_id: str = ""
    status: str = ""
    agent: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def fingerprint(self) -> str:
        raw = json.dumps(
            [
                self.user_id,
                self.conversation_id,
                self.status,
                self.agent,
                self.since.isoformat() if self.since else "",
                self.until.isoformat() if self.until else "",
            ]
        )
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


def encode_token(last_id: str, filters: Bound) -> str:
    return encode_page_token({"id": last_id}, filters.fingerprint())


def decode_token(token: str, filters: Bound) -> str | None:
    """The id (a run's, a card's) a page continues after; None for the first page."""
    position = page_token(token, filters.fingerprint(), ("id",))
    return None if position is None else position["id"]


def _check(filters: RunFilter) -> None:
    if filters.status and filters.status not in RUN_STATUSES:
        raise InvalidArgument(f"status must be one of {', '.join(RUN_STATUSES)}")
    for name, value in (
        ("agent", filters.agent),
        ("user_id", filters.user_id),
        ("conversation_id", filters.conversation_id),
    ):
        if len(value) > MAX_FILTER:
            raise InvalidArgument(f"{name} is longer than {MAX_FILTER} characters")
    if filters.since and filters.until and filters.until < filters.since:
        raise InvalidArgument("end_time is before start_time")


async def list_runs(
    pool: Pool,
    principal: Principal,
    *,
    conversation_id: str = "",
    status: str = "",
    agent: str = "",
    user_id: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    page_size: int = 0,
    page_token: str = "",
) -> tuple[list[RunView], str]:
    """Runs newest first, each with its pending interrupt, and the next page's token ("" on the
    last page)."""
    if not principal.may_act():
        raise PermissionDenied("this token may only read a stream")
    size = page_limit(page_size, default=DEFAULT_PAGE, maximum=MAX_PAGE)
    filters = RunFilter(
        user_id=user_id or principal.user_id,
        conversation_id=conversation_id,
        status=status,
        agent=agent,
        since=since,
        until=until,
    )
    _check(filters)
    before = decode_token(page_token, filters)
    async with pool.acquire() as conn:
        if filters.user_id != principal.user_id and not await policy.granted(
            conn, principal.user_id, ADMIN_ACTION, ADMIN_SCOPE
        ):
            raise PermissionDenied(f"listing other users' runs takes the grant {ADMIN_ACTION} on *")
        owner = None if filters.user_id == EVERY_USER else filters.user_id
        listing = runs.listing_query(
            owner,
            size + 1,
            before,
            conversation_id=conversation_id or None,
            status=status or None,
            agent=agent or None,
            since=since,
            until=until,
        )
        page = await run_pages.read(conn, listing, conversation_id or None)
        if conversation_id and (
            page.conversation_owner is None
            or (owner is not None and page.conversation_owner != owner)
        ):
            raise NotFound("conversation not found", reason="CONVERSATION_NOT_FOUND")
        more = len(page.runs) > size
        rows = page.runs[:size]
        # Retention drops only finished runs' events: the horizon is read once per page.
        horizon = await event_partitions.horizon(conn) if any(r.terminal for r in rows) else ""
    views = [
        replace(
            RunView.of(r, page.pending.get(r.id)),
            events_expired=r.terminal and event_partitions.below(horizon, r.id),
        )
        for r in rows
    ]
    return views, encode_token(rows[-1].id, filters) if more else ""
