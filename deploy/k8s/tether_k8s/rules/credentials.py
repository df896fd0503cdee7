"""Least privilege (issue #16): each component reads only its own secrets, by reference, from its
own Secret; none holds a key it must not have; no secret committed to Tether's repository is in
a render."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tether_k8s.components import GATEWAY, MIGRATE, RUNTIME
from tether_k8s.manifests import Doc, container_name, find, pod_spec
from tether_k8s.rules.model_key import MODEL_KEY_SECRET_NAME

# The secrets each component reads (secretKeyRef), from its own Secret.
OWN_SECRET = {
    RUNTIME: "tether-runtime-secrets",
    GATEWAY: "tether-gateway-secrets",
    MIGRATE: "tether-migrate-secrets",
}
SECRET_KEYS = {
    RUNTIME: ("DATABASE_URL", "REDIS_URL"),
    GATEWAY: ("REDIS_URL",),
    MIGRATE: ("DATABASE_URL",),
}
# Containers of a component that need less than it does (the runtime's init container waits for
# the schema: the database alone).
CONTAINER_SECRET_KEYS = {"wait-for-schema": ("DATABASE_URL",)}
# Only in production (dev runs the HS256 dev issuer instead of an IdP and derives stream keys).
PRODUCTION_SECRET_KEYS = {GATEWAY: ("TETHER_STREAM_TOKEN_SECRET", "TETHER_OIDC_CLIENT_SECRET")}
# What each component must never hold, in any overlay.
FORBIDDEN_KEYS = {
    GATEWAY: ("DATABASE_URL",),
    MIGRATE: ("REDIS_URL", "TETHER_JWT_SECRET", "TETHER_STREAM_TOKEN_SECRET"),
    RUNTIME: ("TETHER_STREAM_TOKEN_SECRET", "TETHER_OIDC_CLIENT_SECRET"),
}
# Keys that sign tokens: none in production (tokens come from the IdP; the gateway's stream key
# is TETHER_STREAM_TOKEN_SECRET).
PRODUCTION_FORBIDDEN_KEYS = ("TETHER_JWT_SECRET",)
SECRET_NAME = re.compile(r"(SECRET|PASSWORD|API_KEY|TOKEN)$|^(DATABASE_URL|REDIS_URL)$")


def _is_component_secret(ref_name: str, own: str) -> bool:
    """`own`, or `own` with the content hash kustomize's secretGenerator appends (dev)."""
    return ref_name == own or re.fullmatch(re.escape(own) + r"-[a-z0-9]{10}", ref_name) is not None


def _secret_keys(docs: Iterable[Doc], name: str) -> set[str]:
    keys: set[str] = set()
    for secret in find(docs, "Secret", name):
        keys |= set(secret.get("data") or {}) | set(secret.get("stringData") or {})
    return keys


def secret_problems(docs: list[Doc], workload: Doc, container: Doc, overlay: str) -> list[str]:
    """Each component reads only its own secrets, by reference, from its own Secret."""
    wname = workload["metadata"]["name"]
    cname = container_name(workload, container)
    problems: list[str] = []
    own = OWN_SECRET.get(wname)
    if own is None:
        return [f"{cname}: not a Tether component (no Secret of its own)"]
    env_by_name = {e["name"]: e for e in container.get("env", [])}
    wanted = list(CONTAINER_SECRET_KEYS.get(container["name"], SECRET_KEYS[wname]))
    if overlay == "production" and container["name"] not in CONTAINER_SECRET_KEYS:
        wanted += PRODUCTION_SECRET_KEYS.get(wname, ())
    for key in wanted:
        ref = (env_by_name.get(key, {}).get("valueFrom") or {}).get("secretKeyRef")
        if ref is None or ref.get("key") != key:
            problems.append(f"{cname}: {key} is not a secretKeyRef")
    known = {d["metadata"]["name"] for d in find(docs, "Secret")}
    for name, var in env_by_name.items():
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if SECRET_NAME.search(name) and "value" in var:
            problems.append(f"{cname}: {name} is a literal value, not a secretKeyRef")
        if ref is None:
            continue
        if not _is_component_secret(ref["name"], own):
            problems.append(f"{cname}: reads Secret {ref['name']}, not its own {own}")
        if overlay != "production" and ref["name"] not in known:
            problems.append(f"{cname}: Secret {ref['name']} is not rendered")
    forbidden = list(FORBIDDEN_KEYS[wname])
    if overlay == "production":
        forbidden += [k for k in PRODUCTION_FORBIDDEN_KEYS if k not in forbidden]
    for key in forbidden:
        if key in env_by_name:
            problems.append(f"{cname}: holds {key}, which this component must not have")
    for src in container.get("envFrom", []):
        if "secretRef" in src:
            problems.append(f"{cname}: envFrom a Secret (every key of it): name each key instead")
    # What the Secrets it reads hold (dev renders them): never a forbidden key.
    read = {
        ref["name"]
        for var in env_by_name.values()
        if (ref := (var.get("valueFrom") or {}).get("secretKeyRef")) is not None
    }
    for secret_name in sorted(read):
        for key in sorted(set(forbidden) & _secret_keys(docs, secret_name)):
            problems.append(f"{cname}: its Secret {secret_name} holds {key}")
    for vol in pod_spec(workload).get("volumes", []):
        secret = (vol.get("secret") or {}).get("secretName", "")
        if secret and not (
            secret.startswith(wname + "-") or (wname == RUNTIME and secret == MODEL_KEY_SECRET_NAME)
        ):
            problems.append(f"{cname}: mounts Secret {secret}, which is not its own")
    return problems


def production_secret_problems(docs: list[Doc]) -> list[str]:
    if find(docs, "Secret"):
        return ["production overlay must not render a Secret (provided by the cluster)"]
    return []


def _string_leaves(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _string_leaves(value)
    elif isinstance(node, list):
        for value in node:
            yield from _string_leaves(value)


def committed_secret_values(docs: Iterable[Doc]) -> list[str]:
    """Every string of the render that is a secret committed to Tether's repository (the
    production guard's list, tether_common.known_secrets), or `K=V` whose V is one."""
    from tether_common.known_secrets import is_committed

    found = []
    for doc in docs:
        texts = list(_string_leaves(doc))
        if doc.get("kind") == "Secret":  # `data` values are base64
            texts += [
                base64.b64decode(v).decode(errors="replace")
                for v in (doc.get("data") or {}).values()
            ]
        for text in texts:
            candidates = [
                text,
                *(line.split("=", 1)[1] for line in text.splitlines() if "=" in line),
            ]
            if any(is_committed(c.strip()) for c in candidates):
                found.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return found
