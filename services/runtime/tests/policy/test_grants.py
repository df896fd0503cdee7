"""Grants in the store: real scope matching against real Postgres, one query per check, and the
input a grant must have."""

from __future__ import annotations

import uuid

import pytest
from tether_runtime import policy
from tether_runtime.store import grants
from tether_testkit.scope_cases import ODD_CASES, SCOPE_CASES


def user() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize(("pattern", "scope", "allowed"), SCOPE_CASES)
async def test_scope_patterns(db, pattern: str, scope: str, allowed: bool) -> None:
    u = user()
    assert await grants.add(db, u, "instance.restart", pattern)
    assert await policy.granted(db, u, "instance.restart", scope) is allowed
    assert grants.matches(pattern, scope) is allowed
    # Another action, or another user, never inherits it.
    assert not await policy.granted(db, u, "service.scale", scope)
    assert not await policy.granted(db, user(), "instance.restart", scope)


async def _sql_matches(db, pattern: str, scope: str) -> bool:
    return bool(
        await db.fetchval(f"SELECT {grants.matches_sql('$1::text', '$2::text')}", pattern, scope)
    )


@pytest.mark.parametrize(("pattern", "scope", "allowed"), SCOPE_CASES)
async def test_the_sql_matcher_is_the_python_matcher(db, pattern: str, scope: str, allowed: bool):
    assert await _sql_matches(db, pattern, scope) is allowed
    assert grants.matches(pattern, scope) is allowed


async def test_the_two_matchers_agree_on_odd_input(db) -> None:
    differ = [
        (p, s) for p, s in ODD_CASES if await _sql_matches(db, p, s) is not grants.matches(p, s)
    ]
    assert differ == []


async def test_add_revoke_list(db) -> None:
    u = user()
    assert await grants.add(db, u, "service.scale", "*/prod")
    assert not await grants.add(db, u, "service.scale", "*/prod")  # twice is once
    assert await grants.add(db, u, "instance.restart", "payment-api/prod")
    assert await grants.list(db, u) == [
        grants.Grant(u, "instance.restart", "payment-api/prod"),
        grants.Grant(u, "service.scale", "*/prod"),
    ]
    assert {g.user_id for g in await grants.list(db)} >= {u, "alice", "bob"}
    # Revoking removes exactly that row: a narrower scope is not carved out of a wider grant.
    assert not await grants.revoke(db, u, "service.scale", "billing-api/prod")
    assert await policy.granted(db, u, "service.scale", "billing-api/prod")
    assert await grants.revoke(db, u, "service.scale", "*/prod")
    assert not await policy.granted(db, u, "service.scale", "billing-api/prod")
    assert not await grants.revoke(db, u, "service.scale", "*/prod")
    assert await grants.list(db, u) == [grants.Grant(u, "instance.restart", "payment-api/prod")]


@pytest.mark.parametrize(
    ("action", "scope", "message"),
    [
        ("", "*", "action"),
        ("  ", "*", "action"),
        ("instance.restart", "", "empty segment"),
        ("instance.restart", "payment-api/", "empty segment"),
        ("instance.restart", "/prod", "empty segment"),
        ("instance.restart", "a//b", "empty segment"),
        ("instance.restart", "payment-*/prod", "not allowed"),
        ("instance.restart", "payment-api/ prod", "not allowed"),
    ],
)
async def test_bad_grants_are_refused(db, action: str, scope: str, message: str) -> None:
    u = user()
    with pytest.raises(grants.InvalidGrant, match=message):
        await grants.add(db, u, action, scope)
    assert await grants.list(db, u) == []
