"""Reading rendered objects: finding them, their pod template, containers and the environment a
container gets (what the kubelet would assemble), and the volume behind a mounted path."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

Doc = dict[str, Any]


def find(docs: Iterable[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [
        d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: Iterable[Doc], kind: str, name: str) -> Doc:
    found = find(docs, kind, name)
    if len(found) != 1:
        raise AssertionError(f"expected exactly one {kind}/{name}, found {len(found)}")
    return found[0]


def pod_spec(workload: Doc) -> Doc:
    spec: Doc = workload["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: Doc) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"]["metadata"].get("labels", {})
    return labels


def containers(workload: Doc) -> list[Doc]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


def main_container(workload: Doc) -> Doc:
    """The first container of the pod: the component itself."""
    container: Doc = pod_spec(workload)["containers"][0]
    return container


def workloads(docs: Iterable[Doc]) -> Iterator[Doc]:
    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield d


def container_name(workload: Doc, container: Doc) -> str:
    """How findings name a container: `Kind/workload container name`."""
    return f"{workload['kind']}/{workload['metadata']['name']} container {container['name']}"


def effective_env(docs: list[Doc], container: Doc) -> dict[str, str]:
    """Plain env values of a container: envFrom ConfigMaps, then env (later wins, as kubelet)."""
    env: dict[str, str] = {}
    for src in container.get("envFrom", []):
        if ref := src.get("configMapRef"):
            for cm in find(docs, "ConfigMap", ref["name"]):
                env.update({str(k): str(v) for k, v in (cm.get("data") or {}).items()})
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif ref := (var.get("valueFrom") or {}).get("configMapKeyRef"):
            for cm in find(docs, "ConfigMap", ref["name"]):
                if ref["key"] in (cm.get("data") or {}):
                    env[var["name"]] = str(cm["data"][ref["key"]])
    return env


def mounted_from(workload: Doc, container: Doc, path: str) -> Doc | None:
    """The volume whose mount holds `path`, if any."""
    volumes: dict[str, Doc] = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(root) and mount["name"] in volumes:
            return volumes[mount["name"]]
    return None
