"""Hosted model providers behind the SDK's model seam, on the official SDKs: one provider
object per agent, built from the agent's config, a resolved base URL and its key."""

from __future__ import annotations

from tether_sdk import Anthropic, Model, OpenAICompatible

from tether_runtime.models.anthropic_provider import AnthropicProvider
from tether_runtime.models.errors import retry_after_s, to_model_error
from tether_runtime.models.keys import Secret, read_api_key
from tether_runtime.models.openai_provider import OpenAIProvider

__all__ = [
    "AnthropicProvider",
    "OpenAIProvider",
    "Secret",
    "build_provider",
    "read_api_key",
    "retry_after_s",
    "to_model_error",
]


def build_provider(
    config: OpenAICompatible | Anthropic,
    *,
    base_url: str,
    api_key: str | Secret,
    agent: str = "",
) -> Model:
    """The provider for `config`. `base_url` is already resolved (config, else the runtime's
    default; empty means the provider's own API); `agent` names the agent in error messages."""
    if isinstance(config, Anthropic):
        return AnthropicProvider(config, base_url=base_url, api_key=api_key, agent=agent)
    return OpenAIProvider(config, base_url=base_url, api_key=api_key, agent=agent)
