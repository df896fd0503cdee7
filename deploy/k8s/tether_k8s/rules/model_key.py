"""The model provider: the runtime is told which one to use (TETHER_MODEL), and a provider's key
comes from the Secret tether-model-key mounted as a file, never an env value."""

from __future__ import annotations

from tether_k8s.components import RUNTIME
from tether_k8s.manifests import Doc, effective_env, main_container, mounted_from

# The model providers a production runtime may use, and the setting holding each one's key file.
MODEL_KEY_FILE = {
    "openai": "TETHER_OPENAI_API_KEY_FILE",
    "anthropic": "TETHER_ANTHROPIC_API_KEY_FILE",
}
MODEL_KEY_SECRET_NAME = "tether-model-key"


def model_problems(docs: list[Doc], runtime: Doc, overlay: str) -> list[str]:
    """The runtime is told which model provider to use (TETHER_MODEL), and a provider's key
    comes from the Secret tether-model-key mounted as a file (never an env value); production
    uses a provider (it refuses a scripted demo model) and needs that Secret."""
    rt = main_container(runtime)
    env = effective_env(docs, rt)
    model = env.get("TETHER_MODEL", "")
    if not model:
        return [f"{RUNTIME}: TETHER_MODEL is not set: no model provider configured"]
    if overlay == "production" and model not in MODEL_KEY_FILE:
        return [f"{RUNTIME}: production TETHER_MODEL={model!r} is not a provider"]
    if model not in MODEL_KEY_FILE:
        return []
    problems: list[str] = []
    setting = MODEL_KEY_FILE[model]
    if setting.removesuffix("_FILE") in {e["name"] for e in rt.get("env", [])}:
        problems.append(f"{RUNTIME}: the {model} key is an env variable, not a mounted file")
    path = env.get(setting, "")
    volume = mounted_from(runtime, rt, path) if path else None
    secret = (volume or {}).get("secret") or {}
    if not path:
        problems.append(f"{RUNTIME}: TETHER_MODEL={model} but {setting} is not set: no key")
    elif secret.get("secretName") != MODEL_KEY_SECRET_NAME:
        problems.append(
            f"{RUNTIME}: {setting}={path} is not in the mounted Secret {MODEL_KEY_SECRET_NAME}"
        )
    elif overlay == "production" and secret.get("optional"):
        problems.append(f"{RUNTIME}: the Secret {MODEL_KEY_SECRET_NAME} is optional in production")
    return problems
