"""Which model drives an agent is decided at start, loudly: an unknown TETHER_MODEL is refused,
production refuses a scripted demo brain unless the agent says it is scripted on purpose, a
provider's key comes from a mounted file before the environment, and the start-up log names the
provider and model, never the key."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings
from tether_runtime.engine.agents import AgentRegistry
from tether_runtime.engine.loaded_agent import AgentLoadError
from tether_runtime.engine.model_choice import ModelConfigError, make_model
from tether_sdk import Agent, Anthropic, OpenAICompatible, ScriptedModel

KEY = "sk-model-choice-secret-0123456789abcdef"


def _agent(model: object) -> Agent:
    return Agent(name="probe", description="-", instructions="-", model=model)  # type: ignore[arg-type]


def test_an_unknown_tether_model_is_refused_with_the_choices() -> None:
    with pytest.raises(UnsafeSettings) as err:
        Settings.from_env({"TETHER_MODEL": "gpt-4"})
    assert "agent, openai, anthropic" in str(err.value) and "'gpt-4'" in str(err.value)


def test_scripted_is_the_old_name_of_each_agents_own_model() -> None:
    assert Settings.from_env({"TETHER_MODEL": "scripted"}).model == "agent"
    assert Settings.from_env({}).model == "agent"


def test_production_refuses_a_scripted_model_unless_the_agent_says_so() -> None:
    prod = Settings(env="production")
    with pytest.raises(ModelConfigError) as err:
        make_model(_agent(ScriptedModel(lambda r: "hi")), prod)
    assert "production" in str(err.value) and "TETHER_MODEL" in str(err.value)
    on_purpose = ScriptedModel(lambda r: "hi", production=True)
    assert make_model(_agent(on_purpose), prod) is on_purpose
    assert make_model(_agent(ScriptedModel(lambda r: "hi")), Settings()) is not None


def test_the_registry_reports_the_refusal_as_an_agent_load_error() -> None:
    settings = Settings(
        env="production", agents=("tether_opspilot:agent",), agent_entry_points=False
    )
    with pytest.raises(AgentLoadError) as err:
        AgentRegistry.load(settings)
    assert "opspilot" in str(err.value) and "ScriptedModel" in str(err.value)


def test_tether_model_points_every_agent_at_the_provider(caplog) -> None:
    caplog.set_level(logging.INFO, logger="tether_runtime.engine.model_choice")
    settings = Settings(
        model="anthropic",
        anthropic_base_url="http://127.0.0.1:9",
        anthropic_api_key=KEY,
        anthropic_model="claude-test",
    )
    model = make_model(_agent(ScriptedModel(lambda r: "hi")), settings)
    assert (getattr(model, "provider", ""), getattr(model, "model", "")) == (
        "anthropic",
        "claude-test",
    )
    (line,) = [r for r in caplog.records if r.getMessage() == "agent model"]
    assert (line.provider, line.model) == ("anthropic", "claude-test")  # type: ignore[attr-defined]
    assert KEY not in repr(line.__dict__) and KEY not in repr(model)


def test_a_key_file_wins_over_the_environment(tmp_path: Path, monkeypatch) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    monkeypatch.setenv("PROBE_KEY", "sk-from-env-should-lose-0123456789")
    config = OpenAICompatible(
        model="m",
        base_url="http://127.0.0.1:9/v1",
        api_key_env="PROBE_KEY",
        api_key_file=str(key_file),
    )
    model = make_model(_agent(config), Settings())
    assert model.provider == "openai"  # type: ignore[attr-defined]
    assert KEY not in repr(model) and "should-lose" not in repr(model)


def test_a_missing_key_file_is_refused_naming_the_path_not_a_key(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    config = Anthropic(model="m", base_url="http://127.0.0.1:9", api_key_file=str(missing))
    with pytest.raises(ModelConfigError) as err:
        make_model(_agent(config), Settings())
    assert str(missing) in str(err.value)
