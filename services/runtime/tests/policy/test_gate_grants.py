"""The user-dependent gate against real Postgres: a tool listed in TETHER_TOOL_ALLOW_GRANT is
offered to and callable by holders of `tool.use` on "agent/tool" only, read at every check; an
operator's deny wins over any grant; observe mode counts a violation and lets it through."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings
from tether_runtime.policy.gate import USE, ToolGate
from tether_runtime.store import grants

TOOLS = ["find_instances", "get_logs", "delete_instance"]


def user() -> str:
    return f"gate-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    assert p is not None
    yield p
    await p.close()


async def test_a_reserved_tool_is_offered_and_allowed_only_to_grant_holders(pool, db) -> None:
    gate = ToolGate("enforce", allow_grant={"opspilot:delete_instance"})
    holder, other = user(), user()
    await grants.add(db, holder, USE, "opspilot/delete_instance")
    assert await gate.offered(pool, "opspilot", TOOLS, holder) == TOOLS
    assert await gate.offered(pool, "opspilot", TOOLS, other) == TOOLS[:2]
    assert await gate.allows(pool, "opspilot", TOOLS, "delete_instance", holder)
    assert not await gate.allows(pool, "opspilot", TOOLS, "delete_instance", other)
    assert await gate.allows(pool, "opspilot", TOOLS, "get_logs", other), "unlisted: open"
    # Another agent's tool of the same name is not covered by the grant, nor reserved.
    assert not gate.needs_grant("mailer", "delete_instance")
    # Never cached: revoked, gone from the next offer and the next call.
    await grants.revoke(db, holder, USE, "opspilot/delete_instance")
    assert await gate.offered(pool, "opspilot", TOOLS, holder) == TOOLS[:2]
    assert not await gate.allows(pool, "opspilot", TOOLS, "delete_instance", holder)


async def test_a_whole_agent_can_be_reserved_and_granted_by_pattern(pool, db) -> None:
    gate = ToolGate("enforce", allow_grant={"opspilot:*"})
    holder, other = user(), user()
    await grants.add(db, holder, USE, "opspilot/*")
    assert await gate.offered(pool, "opspilot", TOOLS, holder) == TOOLS
    assert await gate.offered(pool, "opspilot", TOOLS, other) == []
    assert not await gate.allows(pool, "opspilot", TOOLS, "find_instances", other)


async def test_deny_wins_and_observe_counts_but_lets_through(pool, db) -> None:
    holder = user()
    await grants.add(db, holder, USE, "opspilot/*")
    both = ToolGate("enforce", deny={"opspilot:get_logs"}, allow_grant={"opspilot:*"})
    assert "get_logs" not in await both.offered(pool, "opspilot", TOOLS, holder)
    assert not await both.allows(pool, "opspilot", TOOLS, "get_logs", holder)
    observe = ToolGate("observe", allow_grant={"opspilot:delete_instance"})
    assert await observe.allows(pool, "opspilot", TOOLS, "delete_instance", user())
    # observe still offers only what enforce would: the model is never shown a reserved tool.
    assert "delete_instance" not in await observe.offered(pool, "opspilot", TOOLS, user())


def test_the_setting_is_read_and_a_malformed_entry_fails_the_start() -> None:
    s = Settings.from_env({"TETHER_TOOL_ALLOW_GRANT": " opspilot:delete_instance , mailer:* "})
    assert s.tool_allow_grant == frozenset({"opspilot:delete_instance", "mailer:*"})
    assert Settings.from_env({}).tool_allow_grant == frozenset()
    for bad in ("opspilot", "opspilot:", ":tool", "a:b:c", "opspilot/delete_instance:x"):
        with pytest.raises(UnsafeSettings, match="TETHER_TOOL_ALLOW_GRANT"):
            Settings.from_env({"TETHER_TOOL_ALLOW_GRANT": bad})
