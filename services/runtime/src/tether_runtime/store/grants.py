"""Grants: who may do which action on which scope. Read at every check and never cached, so
adding or revoking one takes effect for runs already waiting (at resume and at execution).

A scope is `/`-separated segments, e.g. `payment-api/prod`. A grant's scope is an exact scope,
`*` (everything), or a pattern whose segments may each be `*` (one whole segment, any value):
`payment-api/*` allows `payment-api/prod` and `payment-api/staging`, `*/prod` allows any service
in prod, and `payment-api/prod` does not allow `payment-api/staging`. A pattern matches only
scopes with as many segments as it has (`payment-api/*` does not allow `payment-api/prod/eu`)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass

from tether_runtime.store.db import Conn

ANY = "*"


class InvalidGrant(ValueError):
    """An action or scope no check could ever match as meant."""


@dataclass(frozen=True)
class Grant:
    user_id: str
    action: str
    scope: str


def check(user_id: str, action: str, scope: str) -> None:
    """Raise InvalidGrant with a message a person can act on."""
    if not user_id.strip():
        raise InvalidGrant("the user must not be empty")
    if not action.strip() or action != action.strip():
        raise InvalidGrant("the action must be a non-empty name without surrounding spaces")
    if scope == ANY:
        return
    if not scope or any(not s for s in scope.split("/")):
        raise InvalidGrant(f"the scope {scope!r} has an empty segment (e.g. 'a//b' or 'a/')")
    for segment in scope.split("/"):
        if segment != ANY and (ANY in segment or segment != segment.strip()):
            raise InvalidGrant(
                f"the scope segment {segment!r} is not allowed: a segment is a name or exactly"
                " '*' (no partial wildcards, no surrounding spaces)"
            )


def matches(pattern: str, scope: str) -> bool:
    """Whether a grant for `pattern` allows `scope` (see the module's docstring)."""
    if pattern == ANY:
        return True
    want, have = pattern.split("/"), scope.split("/")
    return len(want) == len(have) and all(w in (ANY, h) for w, h in zip(want, have, strict=True))


def matches_sql(pattern: str, scope: str) -> str:
    """`matches` as a SQL condition on two text expressions (columns or `$n` parameters), for a
    query that filters by grant in the store (the approvals inbox): the same rule, row for row
    (tests/test_grants.py holds the two to one table of cases)."""
    want, have = f"string_to_array({pattern}, '/')", f"string_to_array({scope}, '/')"
    return (
        f"({pattern} = '*' OR (cardinality({want}) = cardinality({have}) AND NOT EXISTS ("
        f"SELECT 1 FROM unnest({want}, {have}) AS seg(want, have) "
        "WHERE seg.want <> '*' AND seg.want IS DISTINCT FROM seg.have)))"
    )


async def has_grant(conn: Conn, user_id: str, action: str, scope: str) -> bool:
    """One query: the user's scopes for this action, matched here."""
    rows = await conn.fetch(
        'SELECT scope FROM "grant" WHERE user_id = $1 AND action = $2', user_id, action
    )
    return any(matches(r["scope"], scope) for r in rows)


async def add(conn: Conn, user_id: str, action: str, scope: str) -> bool:
    """True if the grant is new (adding it twice is the same as once)."""
    check(user_id, action, scope)
    result = await conn.execute(
        'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
        user_id,
        action,
        scope,
    )
    return str(result).endswith(" 1")


async def revoke(conn: Conn, user_id: str, action: str, scope: str) -> bool:
    """True if the grant existed. Revokes exactly this row: a narrower scope is not carved out of
    a wider grant."""
    check(user_id, action, scope)
    result = await conn.execute(
        'DELETE FROM "grant" WHERE user_id = $1 AND action = $2 AND scope = $3',
        user_id,
        action,
        scope,
    )
    return str(result).endswith(" 1")


async def list(conn: Conn, user_id: str | None = None) -> builtins.list[Grant]:
    rows = await conn.fetch(
        'SELECT user_id, action, scope FROM "grant" WHERE $1::text IS NULL OR user_id = $1 '
        "ORDER BY user_id, action, scope",
        user_id,
    )
    return [Grant(r["user_id"], r["action"], r["scope"]) for r in rows]
