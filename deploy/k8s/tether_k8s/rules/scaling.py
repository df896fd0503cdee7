"""Replicas, autoscaling and disruption budgets: each Deployment runs enough pods, scales out with
one autoscaling/v2 HPA and is covered by one PodDisruptionBudget."""

from __future__ import annotations

from tether_k8s.manifests import Doc, find, pod_labels
from tether_k8s.rules import unmet
from tether_k8s.selectors import selector_matches


def min_replicas(overlay: str) -> int:
    return 3 if overlay == "production" else 2


def scaling_problems(docs: list[Doc], deployment: Doc, overlay: str) -> list[str]:
    least = min_replicas(overlay)
    name = deployment["metadata"]["name"]
    replicas = deployment["spec"].get("replicas", 1)
    problems = unmet((replicas >= least, f"{name}: replicas {replicas} < {least}"))
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    hpas = [
        h for h in find(docs, "HorizontalPodAutoscaler") if h["spec"]["scaleTargetRef"] == target
    ]
    problems += unmet(
        (
            len(hpas) == 1 and hpas[0]["apiVersion"] == "autoscaling/v2",
            f"{name}: needs exactly one autoscaling/v2 HPA",
        )
    )
    for h in hpas:
        problems += unmet(
            (h["spec"].get("minReplicas", 1) >= least, f"{name}: HPA minReplicas < {least}"),
            (
                h["spec"]["maxReplicas"] > h["spec"].get("minReplicas", 1),
                f"{name}: HPA cannot scale out",
            ),
        )
    pdbs = [
        p
        for p in find(docs, "PodDisruptionBudget")
        if selector_matches(p["spec"]["selector"], pod_labels(deployment))
    ]
    problems += unmet(
        (len(pdbs) == 1, f"{name}: needs exactly one PodDisruptionBudget selecting its pods")
    )
    for p in pdbs:
        problems += unmet(
            (
                "maxUnavailable" in p["spec"] or "minAvailable" in p["spec"],
                f"{name}: PDB has no budget",
            )
        )
    problems += unmet(
        (
            selector_matches(deployment["spec"]["selector"], pod_labels(deployment)),
            f"{name}: selector misses its pods",
        )
    )
    return problems
