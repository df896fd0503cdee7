"""Every namespaced object lives in Tether's namespace."""

from __future__ import annotations

from tether_k8s.components import NAMESPACE
from tether_k8s.manifests import Doc

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "IngressClass"}


def namespace_problems(docs: list[Doc]) -> list[str]:
    return [
        f"{d['kind']}/{d['metadata']['name']} is not in namespace {NAMESPACE}"
        for d in docs
        if d["kind"] not in CLUSTER_SCOPED and d["metadata"].get("namespace") != NAMESPACE
    ]
