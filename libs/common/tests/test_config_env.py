"""Settings.from_env: only the mapping it is given, the names that take no prefix, the defaults
that follow other settings, and the text forms of numbers, switches and lists."""

from __future__ import annotations

import pydantic
import pytest
from tether_common.config import DEV_JWT_SECRET, Settings
from tether_common.errors import UnsafeSettings


def test_a_given_mapping_is_all_that_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_DRAIN_S", "9")
    monkeypatch.setenv("DATABASE_URL", "postgresql://elsewhere/db")
    assert Settings.from_env({}).drain_s == 20.0
    assert Settings.from_env({}).database_url == Settings().database_url
    assert Settings.from_env().drain_s == 9.0  # None: the process environment
    assert Settings.from_env().database_url == "postgresql://elsewhere/db"
    assert Settings().drain_s == 20.0  # Settings(...) is its arguments over the defaults


def test_names_without_the_prefix_and_names_as_written() -> None:
    s = Settings.from_env(
        {
            "DATABASE_URL": "postgresql://db/x",
            "REDIS_URL": "redis://r:6379/1",
            "OTEL_SERVICE_NAME": "tether-eu",
            "TETHER_TOOL_GATE": "observe",
            "tether_drain_s": "3",  # not TETHER_DRAIN_S
            "TETHER_DATABASE_URL": "postgresql://not/this",
        }
    )
    assert (s.database_url, s.redis_url, s.service_name) == (
        "postgresql://db/x",
        "redis://r:6379/1",
        "tether-eu",
    )
    assert s.tool_gate_mode == "observe"
    assert s.drain_s == 20.0


def test_defaults_that_follow_other_settings() -> None:
    prod = Settings.from_env({"TETHER_ENV": "production"})
    assert (prod.redis_url, prod.jwt_secret, prod.grpc_reflection) == ("", "", False)
    dev = Settings.from_env({})
    assert (dev.redis_url, dev.jwt_secret, dev.grpc_reflection) == (
        "redis://127.0.0.1:6379/0",
        DEV_JWT_SECRET,
        True,
    )
    s = Settings.from_env({"TETHER_GRPC_ADDR": "0.0.0.0:7000", "TETHER_RATE_LIMIT_PER_MIN": "7"})
    assert s.runtime_target == "0.0.0.0:7000"
    assert s.rate_limit_start_per_min == s.rate_limit_cancel_per_min == 7
    s = Settings.from_env(
        {"TETHER_RATE_LIMIT_PER_MIN": "7", "TETHER_RATE_LIMIT_EVENTS_PER_MIN": ""}
    )
    assert s.rate_limit_events_per_min == 7
    s = Settings.from_env({"TETHER_RUNTIME_TARGET": "dns:///rt:50051", "REDIS_URL": ""})
    assert (s.runtime_target, s.redis_url) == ("dns:///rt:50051", "")  # empty text is a value


def test_coalescing_is_set_in_milliseconds() -> None:
    assert Settings.from_env({"TETHER_COALESCE_MS": "10"}).coalesce_s == 0.01
    assert Settings.from_env({"TETHER_COALESCE_MS": ""}).coalesce_s == 0.04
    assert Settings(coalesce_s=0.5).coalesce_s == 0.5
    with pytest.raises(UnsafeSettings, match=r"^TETHER_COALESCE_MS='soon' is not a number$"):
        Settings.from_env({"TETHER_COALESCE_MS": "soon"})


def test_numbers_switches_and_lists_from_text() -> None:
    assert Settings.from_env({"TETHER_LEASE_TTL_S": ""}).lease_ttl_s == 15.0
    assert Settings.from_env({"TETHER_SSE_RETRY_MS": "1500.9"}).sse_retry_ms == 1500
    with pytest.raises(UnsafeSettings, match=r"^TETHER_LEASE_TTL_S='15s' is not a number$"):
        Settings.from_env({"TETHER_LEASE_TTL_S": "15s"})
    for word, value in (("1", True), ("Yes", True), ("on", True), ("0", False), ("off", False)):
        assert Settings.from_env({"TETHER_TRUST_TRACEPARENT": word}).trust_traceparent is value
        assert Settings.from_env({"TETHER_AGENT_ENTRY_POINTS": word}).agent_entry_points is value
    with pytest.raises(UnsafeSettings, match=r"^TETHER_EMBEDDED_STORES='yep' is not a switch"):
        Settings.from_env({"TETHER_EMBEDDED_STORES": "yep"})
    s = Settings.from_env({"TETHER_AGENTS": " a:b ,, c:d ", "TETHER_TOOL_DENY": "x:y, z:w"})
    assert s.agents == ("a:b", "c:d")
    assert s.tool_deny == frozenset({"x:y", "z:w"})
    assert Settings.from_env({"TETHER_MODEL": ""}).model == "agent"


def test_frozen_copied_and_shown_masked() -> None:
    s = Settings.from_env({"TETHER_OPENAI_API_KEY": "sk-proj-abcdefghijklmnopqrstuvwx0123456789"})
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        s.drain_s = 1.0  # type: ignore[misc]
    assert s.model_copy(update={"drain_s": 1.0}).drain_s == 1.0
    assert s.drain_s == 20.0
    view = s.public_view()
    assert "abcdefghijklmnop" not in str(view)
    assert view["drain_s"] == 20.0


def test_the_core_configuration_names_no_agent() -> None:
    assert Settings().default_agent == ""
    assert Settings.from_env({}).default_agent == ""
    assert Settings.from_env({"TETHER_DEFAULT_AGENT": "opspilot"}).default_agent == "opspilot"
