"""Tether's settings in the pods: TETHER_ENV says the overlay's mode, the ConfigMaps a container
reads exist, and no setting only `tether dev` may use is set; the base and production carry no
dev setting, no Secret and no secret at all."""

from __future__ import annotations

from tether_k8s.manifests import Doc, container_name, containers, effective_env, find, workloads
from tether_k8s.rules import unmet
from tether_k8s.rules.credentials import SECRET_NAME, committed_secret_values

# Settings only `tether dev` (and tests) may set.
DEV_ONLY_SETTINGS = ("TETHER_DEV_LOGIN", "TETHER_EMBEDDED_STORES", "TETHER_CONFORMANCE_PLAN")


def container_problems(docs: list[Doc], workload: Doc, container: Doc, overlay: str) -> list[str]:
    cname = container_name(workload, container)
    expected_env = "production" if overlay == "production" else "dev"
    problems = unmet(
        *(
            (find(docs, "ConfigMap", ref["name"]), f"{cname}: ConfigMap {ref['name']} missing")
            for src in container.get("envFrom", [])
            if (ref := src.get("configMapRef"))
        )
    )
    env = effective_env(docs, container)
    return problems + unmet(
        (env.get("TETHER_ENV") == expected_env, f"{cname}: TETHER_ENV={env.get('TETHER_ENV')!r}"),
        *(
            (name not in env, f"{cname}: sets {name}, which only `tether dev` may")
            for name in DEV_ONLY_SETTINGS
        ),
    )


def dev_setting_problems(docs: list[Doc]) -> list[str]:
    """What the base and production must not carry: a dev setting, a Secret, a secret literal,
    a committed key."""
    problems: list[str] = []
    for cm in find(docs, "ConfigMap"):
        data = cm.get("data") or {}
        name = f"ConfigMap/{cm['metadata']['name']}"
        if data.get("TETHER_ENV", "production") != "production":
            problems.append(f"{name}: TETHER_ENV={data['TETHER_ENV']!r} (dev setting)")
        for key in data:
            if key in DEV_ONLY_SETTINGS:
                problems.append(f"{name}: sets {key} (dev setting)")
            if SECRET_NAME.search(key):
                problems.append(f"{name}: holds {key}, a secret, as plain configuration")
    for w in workloads(docs):
        for c in containers(w):
            cname = container_name(w, c)
            env = effective_env(docs, c)
            if env.get("TETHER_ENV") != "production":
                problems.append(f"{cname}: TETHER_ENV={env.get('TETHER_ENV')!r} (dev setting)")
            for key in DEV_ONLY_SETTINGS:
                if key in env:
                    problems.append(f"{cname}: sets {key} (dev setting)")
            for var in c.get("env", []):
                if SECRET_NAME.search(var["name"]) and "value" in var:
                    problems.append(f"{cname}: {var['name']} is a secret literal")
    if find(docs, "Secret"):
        problems.append("renders a Secret: secrets come from the cluster, never from git")
    for where in committed_secret_values(docs):
        problems.append(f"{where}: carries a secret committed to Tether's repository")
    return problems
