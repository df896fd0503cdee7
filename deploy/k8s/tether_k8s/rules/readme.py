"""The operator's guide, deploy/k8s/README.md, says what the cluster must supply: a `kubectl
create` for every Secret and ConfigMap the render references but does not hold, every Ingress host
to replace, and the labels internal callers of the runtime need."""

from __future__ import annotations

import re

from tether_k8s.components import RUNTIME_CLIENT_LABEL, RUNTIME_CLIENTS_NS_LABEL
from tether_k8s.manifests import Doc, containers, find, pod_spec, workloads
from tether_k8s.rendering import K8S_DIR

README = K8S_DIR / "README.md"
_CREATE = re.compile(r"kubectl\b[^\n]*\bcreate\s+(?:secret\s+\w+|configmap)\s+([a-z0-9-]+)")


def provided_objects(docs: list[Doc]) -> set[str]:
    """The Secrets and ConfigMaps the render references but does not hold: the cluster's."""
    rendered = {d["metadata"]["name"] for d in docs if d["kind"] in ("Secret", "ConfigMap")}
    names: set[str] = set()
    for w in workloads(docs):
        for vol in pod_spec(w).get("volumes", []):
            names.add((vol.get("secret") or {}).get("secretName", ""))
            names.add((vol.get("configMap") or {}).get("name", ""))
        for c in containers(w):
            for var in c.get("env", []):
                ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
                names.add(ref.get("name", ""))
    for ing in find(docs, "Ingress"):
        names |= {t.get("secretName", "") for t in ing["spec"].get("tls") or []}
    return {n for n in names if n and n not in rendered}


def readme_problems(docs: list[Doc], readme: str) -> list[str]:
    """What an operator must supply is in deploy/k8s/README.md: a `kubectl create` for every
    Secret and ConfigMap the cluster provides (the Ingress certificate and the model key too),
    every Ingress host to replace, and the label internal callers of the runtime need."""
    problems: list[str] = []
    created = set(_CREATE.findall(readme))
    for name in sorted(provided_objects(docs) - created):
        problems.append(f"README: no `kubectl create` for {name}, which the cluster must provide")
    for ing in find(docs, "Ingress"):
        for rule in ing["spec"].get("rules", []):
            host = rule.get("host", "")
            if host and f"`{host}`" not in readme:
                problems.append(f"README: the Ingress host {host} is not named (to replace)")
    for key, value in (*RUNTIME_CLIENT_LABEL.items(), *RUNTIME_CLIENTS_NS_LABEL.items()):
        if f"{key}={value}" not in readme:
            problems.append(f"README: internal callers' label {key}={value} is not documented")
    return problems
