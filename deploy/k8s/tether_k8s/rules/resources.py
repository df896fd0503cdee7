"""Resources: every container requests and limits CPU and memory, and each Deployment runs one
process per CPU of its limit (TETHER_PROCESSES)."""

from __future__ import annotations

from tether_k8s.manifests import Doc, container_name, effective_env, find, main_container
from tether_k8s.rules import unmet


def container_problems(workload: Doc, container: Doc) -> list[str]:
    res = container.get("resources") or {}
    cname = container_name(workload, container)
    return unmet(
        *(
            (r in (res.get(kind) or {}), f"{cname}: no {kind}.{r}")
            for kind in ("requests", "limits")
            for r in ("cpu", "memory")
        )
    )


def cpus(quantity: object) -> float:
    """A CPU quantity in cores: "2", 2, "1.5" or millicores "500m" (the forms Kubernetes
    writes for CPU; a full quantity parser, the kubernetes or lightkube client's
    parse_quantity, would bring seven more packages into the lock for this one line)."""
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def processes_problems(docs: list[Doc], overlay: str) -> list[str]:
    """Each Deployment says how many processes a pod runs (TETHER_PROCESSES) and its CPU limit
    gives each one a core: processes = limits.cpu rounded up; in production requests = limits
    (no process throttled, the HPA's CPU target measured against what they can use)."""
    problems: list[str] = []
    for dep in find(docs, "Deployment"):
        name = dep["metadata"]["name"]
        main = main_container(dep)
        raw = effective_env(docs, main).get("TETHER_PROCESSES", "")
        if not raw.isdigit() or int(raw) < 1:
            problems.append(f"{name}: TETHER_PROCESSES={raw!r}: set the processes per pod")
            continue
        res = main.get("resources") or {}
        limit = cpus((res.get("limits") or {}).get("cpu", 0))
        request = cpus((res.get("requests") or {}).get("cpu", 0))
        if int(raw) != -(-limit // 1):
            problems.append(
                f"{name}: TETHER_PROCESSES={raw} does not match limits.cpu {limit:g} "
                "(one process per CPU)"
            )
        if overlay == "production" and request != limit:
            problems.append(
                f"{name}: requests.cpu {request:g} != limits.cpu {limit:g} in production"
            )
    return problems
