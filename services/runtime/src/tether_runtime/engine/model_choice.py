"""Which model drives each agent, decided once at start, loudly.

An agent names its model: a `ScriptedModel`, a provider (`OpenAICompatible`, `Anthropic`) the
engine drives through the provider's official SDK, or any object with `stream(request)`.
TETHER_MODEL=openai|anthropic points every agent at one configured provider instead. A
production runtime refuses a scripted model unless the agent says it is scripted on purpose
(`ScriptedModel(..., production=True)`): a demo brain must not answer real users by accident."""

from __future__ import annotations

import logging

from tether_common.config import Settings
from tether_sdk import Agent, Anthropic, Model, OpenAICompatible, ScriptedModel

log = logging.getLogger(__name__)


class ModelConfigError(Exception):
    """An agent's model cannot be used as configured; the message says which and why."""


def configured(agent: Agent, settings: Settings) -> Model | OpenAICompatible | Anthropic:
    """The agent's model as configuration decides (TETHER_MODEL overrides the agent's own)."""
    if settings.model == "openai":
        return OpenAICompatible(
            model=settings.openai_model,
            base_url=settings.openai_base_url,
            api_key_file=settings.openai_api_key_file,
        )
    if settings.model == "anthropic":
        return Anthropic(
            model=settings.anthropic_model,
            base_url=settings.anthropic_base_url,
            api_key_file=settings.anthropic_api_key_file,
        )
    return agent.model


def _key(config: OpenAICompatible | Anthropic, settings: Settings) -> str:
    from tether_runtime.models import read_api_key

    try:
        key = read_api_key(config.api_key_file, config.api_key_env)
    except ValueError as err:
        raise ModelConfigError(str(err)) from err
    if key:
        return key
    # TETHER_OPENAI_API_KEY / TETHER_ANTHROPIC_API_KEY as read into the settings (tests and
    # tools pass settings without touching os.environ).
    return settings.openai_api_key if config.provider == "openai" else settings.anthropic_api_key


def make_model(agent: Agent, settings: Settings) -> Model:
    if callable(getattr(agent, "drive", None)):
        # An agent that drives its own loop (a LangGraph graph, driven.py) calls its own models:
        # TETHER_MODEL does not apply, and its placeholder is never asked for a step.
        log.info("agent model", extra={"agent": agent.name, "provider": "driven"})
        return agent.model  # type: ignore[return-value]
    config = configured(agent, settings)
    if isinstance(config, OpenAICompatible | Anthropic):
        from tether_runtime.models import build_provider

        default_url = (
            settings.openai_base_url if config.provider == "openai" else settings.anthropic_base_url
        )
        model = build_provider(
            config,
            base_url=config.base_url or default_url,
            api_key=_key(config, settings),
            agent=agent.name,
        )
        log.info(
            "agent model",
            extra={
                "agent": agent.name,
                "provider": config.provider,
                "model": config.model,
                "base_url": config.base_url or default_url or "(provider default)",
            },
        )
        return model
    if isinstance(config, ScriptedModel):
        if settings.env == "production" and not config.production:
            raise ModelConfigError(
                f"agent {agent.name!r} has a ScriptedModel, which a production runtime refuses: "
                "set TETHER_MODEL=openai or anthropic (with its key), give the agent a provider, "
                "or, for an agent that is scripted on purpose, ScriptedModel(..., production=True)"
            )
        log.info("agent model", extra={"agent": agent.name, "provider": "scripted"})
        return config
    log.info(
        "agent model",
        extra={"agent": agent.name, "provider": "custom", "model": type(config).__name__},
    )
    return config
