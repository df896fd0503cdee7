#!/usr/bin/env python3
"""Render every kustomize overlay of deploy/k8s and check it without a cluster.

1. Render with a real kustomize: the standalone `kustomize` binary if present, else
   `kubectl kustomize` (kubectl embeds kustomize v5).
2. Validate every rendered object against the OpenAPI-derived JSON schemas of a pinned
   Kubernetes version (the `kubernetes-validate` package ships them; strict mode rejects unknown
   fields, which catches typos like `readinesProbe`).
3. Check Tether's operational contract: replicas, probes, headless runtime Service, drain timing,
   security context, secrets by reference, NetworkPolicies, HPA/PDB, SSE ingress annotations.

Usage:  uv run python deploy/k8s/validate.py [--k8s-version 1.31] [--out DIR] [OVERLAY ...]
Exit status 0 when every overlay renders, validates and passes every check.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

K8S_DIR = Path(__file__).resolve().parent
OVERLAYS_DIR = K8S_DIR / "overlays"
K8S_VERSION = "1.31"  # the oldest Kubernetes minor these manifests must be valid for
NAMESPACE = "tether"
RUNTIME = "tether-runtime"
GATEWAY = "tether-gateway"
MIGRATE = "tether-migrate"
HEADLESS = "tether-runtime-headless"
GRPC_PORT = 50051
RUNTIME_METRICS_PORT = 9464
HTTP_PORT = 8080
APP_UID = 10001
SECRET_KEYS = ("DATABASE_URL", "REDIS_URL", "TETHER_JWT_SECRET")
SSE_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "IngressClass"}

Doc = dict[str, Any]


class RenderError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- rendering


def renderer() -> list[str]:
    """The command that renders a kustomization directory (appended as the last argument)."""
    if exe := shutil.which("kustomize"):
        return [exe, "build"]
    if exe := shutil.which("kubectl"):
        return [exe, "kustomize"]
    raise RenderError(
        "no kustomize renderer: install kubectl (Debian/Ubuntu package `kubectl`, which embeds "
        "kustomize v5) or the standalone `kustomize` binary"
    )


def overlays() -> list[Path]:
    return sorted(p for p in OVERLAYS_DIR.iterdir() if (p / "kustomization.yaml").is_file())


def render_text(path: Path) -> str:
    cmd = [*renderer(), str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RenderError(f"{' '.join(cmd)} failed:\n{proc.stderr.strip()}")
    return proc.stdout


def render(path: Path) -> list[Doc]:
    docs = [d for d in yaml.safe_load_all(render_text(path)) if d]
    if not docs:
        raise RenderError(f"{path} rendered no objects")
    return docs


# ----------------------------------------------------------------------------- schemas


def schema_errors(docs: Iterable[Doc], version: str = K8S_VERSION) -> list[str]:
    errors = []
    for doc in docs:
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = "/".join(str(p) for p in err.path)
            errors.append(f"{name}: {err.message} (at /{path}, Kubernetes {version})")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{name}: no schema for {doc.get('apiVersion')} in Kubernetes {version}")
    return errors


# ----------------------------------------------------------------------------- helpers


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


def workloads(docs: Iterable[Doc]) -> Iterator[Doc]:
    for d in docs:
        if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield d


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics (an empty selector matches everything)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


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


def prestop_sleep_s(container: Doc) -> float:
    pre = (container.get("lifecycle") or {}).get("preStop") or {}
    if "sleep" in pre:
        return float(pre["sleep"]["seconds"])
    cmd = (pre.get("exec") or {}).get("command") or []
    if len(cmd) == 2 and cmd[0] in ("sleep", "/bin/sleep"):
        return float(cmd[1])
    return 0.0


def secret_names(docs: Iterable[Doc]) -> set[str]:
    return {d["metadata"]["name"] for d in find(docs, "Secret")}


def policies_selecting(docs: Iterable[Doc], labels: Mapping[str, str]) -> list[Doc]:
    return [
        np
        for np in find(docs, "NetworkPolicy")
        if selector_matches(np["spec"]["podSelector"], labels)
    ]


def rule_ports(rule: Mapping[str, Any]) -> set[tuple[str, Any]]:
    return {(p.get("protocol", "TCP"), p.get("port")) for p in rule.get("ports") or []}


# ----------------------------------------------------------------------------- contract checks


def check(docs: list[Doc], overlay: str) -> list[str]:
    """Every way these manifests break Tether's operational contract (empty list = fine)."""
    problems: list[str] = []

    def need(cond: object, msg: str) -> None:
        if not cond:
            problems.append(msg)

    try:
        runtime = one(docs, "Deployment", RUNTIME)
        gateway = one(docs, "Deployment", GATEWAY)
        job = one(docs, "Job", MIGRATE)
        headless = one(docs, "Service", HEADLESS)
        ingress = one(docs, "Ingress", GATEWAY)
    except AssertionError as err:
        return [str(err)]

    min_replicas = 3 if overlay == "production" else 2
    expected_env = "production" if overlay == "production" else "dev"

    # namespace
    for d in docs:
        if d["kind"] not in CLUSTER_SCOPED:
            need(
                d["metadata"].get("namespace") == NAMESPACE,
                f"{d['kind']}/{d['metadata']['name']} is not in namespace {NAMESPACE}",
            )

    # replicas, HPA, PDB
    for dep in (runtime, gateway):
        name = dep["metadata"]["name"]
        need(
            dep["spec"].get("replicas", 1) >= min_replicas,
            f"{name}: replicas {dep['spec'].get('replicas', 1)} < {min_replicas}",
        )
        hpas = [
            h
            for h in find(docs, "HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"]
            == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        ]
        need(
            len(hpas) == 1 and hpas[0]["apiVersion"] == "autoscaling/v2",
            f"{name}: needs exactly one autoscaling/v2 HPA",
        )
        for h in hpas:
            need(
                h["spec"].get("minReplicas", 1) >= min_replicas,
                f"{name}: HPA minReplicas < {min_replicas}",
            )
            need(
                h["spec"]["maxReplicas"] > h["spec"].get("minReplicas", 1),
                f"{name}: HPA cannot scale out",
            )
        pdbs = [
            p
            for p in find(docs, "PodDisruptionBudget")
            if selector_matches(p["spec"]["selector"], pod_labels(dep))
        ]
        need(len(pdbs) == 1, f"{name}: needs exactly one PodDisruptionBudget selecting its pods")
        for p in pdbs:
            need(
                "maxUnavailable" in p["spec"] or "minAvailable" in p["spec"],
                f"{name}: PDB has no budget",
            )
        need(
            selector_matches(dep["spec"]["selector"], pod_labels(dep)),
            f"{name}: selector misses its pods",
        )

    # every container: security context, resources, secrets by reference, no :latest
    known_secrets = secret_names(docs)
    for w in workloads(docs):
        wname = f"{w['kind']}/{w['metadata']['name']}"
        pod_sc = pod_spec(w).get("securityContext") or {}
        need(
            pod_spec(w).get("automountServiceAccountToken") is False, f"{wname}: mounts an SA token"
        )
        need(
            pod_spec(w).get("enableServiceLinks") is False,
            f"{wname}: service links would inject TETHER_* variables",
        )
        for c in containers(w):
            cname = f"{wname} container {c['name']}"
            sc = c.get("securityContext") or {}
            need(
                sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, f"{cname}: runAsNonRoot"
            )
            need(
                sc.get("runAsUser", pod_sc.get("runAsUser")) == APP_UID,
                f"{cname}: runAsUser != {APP_UID}",
            )
            need(sc.get("readOnlyRootFilesystem") is True, f"{cname}: root filesystem is writable")
            need(sc.get("allowPrivilegeEscalation") is False, f"{cname}: allowPrivilegeEscalation")
            need(sc.get("privileged") is not True, f"{cname}: privileged")
            need(
                (sc.get("capabilities") or {}).get("drop") == ["ALL"],
                f"{cname}: capabilities not dropped",
            )
            need(
                ((sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type"))
                == "RuntimeDefault",
                f"{cname}: seccompProfile is not RuntimeDefault",
            )
            res = c.get("resources") or {}
            for kind in ("requests", "limits"):
                for r in ("cpu", "memory"):
                    need(r in (res.get(kind) or {}), f"{cname}: no {kind}.{r}")
            image = c.get("image", "")
            need(
                ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"),
                f"{cname}: image {image!r} has no pinned tag",
            )
            env_by_name = {e["name"]: e for e in c.get("env", [])}
            for key in SECRET_KEYS:
                ref = (env_by_name.get(key, {}).get("valueFrom") or {}).get("secretKeyRef")
                need(
                    ref is not None and ref.get("key") == key,
                    f"{cname}: {key} is not a secretKeyRef",
                )
                if ref and overlay != "production":
                    need(
                        ref["name"] in known_secrets,
                        f"{cname}: Secret {ref['name']} is not rendered",
                    )
            for src in c.get("envFrom", []):
                if ref := src.get("configMapRef"):
                    need(
                        find(docs, "ConfigMap", ref["name"]),
                        f"{cname}: ConfigMap {ref['name']} missing",
                    )
            env = effective_env(docs, c)
            need(
                env.get("TETHER_ENV") == expected_env,
                f"{cname}: TETHER_ENV={env.get('TETHER_ENV')!r}",
            )

    if overlay == "production":
        need(
            not find(docs, "Secret"),
            "production overlay must not render a Secret (provided by the cluster)",
        )

    # drain timing, probes, addresses
    for dep in (runtime, gateway):
        name = dep["metadata"]["name"]
        main = pod_spec(dep)["containers"][0]
        env = effective_env(docs, main)
        drain = float(env.get("TETHER_DRAIN_S", "20"))
        grace = pod_spec(dep).get("terminationGracePeriodSeconds", 30)
        sleep = prestop_sleep_s(main)
        need(sleep > 0, f"{name}: no preStop sleep before SIGTERM")
        need(
            grace > drain + sleep,
            f"{name}: terminationGracePeriodSeconds {grace} <= "
            f"preStop {sleep} + TETHER_DRAIN_S {drain}",
        )
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            need(probe in main, f"{name}: no {probe}")
        live = main.get("livenessProbe") or {}
        need(
            live.get("periodSeconds", 10) * live.get("failureThreshold", 3) > grace,
            f"{name}: liveness could restart a draining pod before its grace period ends",
        )

    rt = pod_spec(runtime)["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        need(
            (rt.get(probe) or {}).get("grpc", {}).get("port") == GRPC_PORT,
            f"{RUNTIME}: {probe} is not a native grpc probe on {GRPC_PORT}",
        )
    rt_env = effective_env(docs, rt)
    need(
        rt_env.get("TETHER_GRPC_ADDR", "").endswith(f":{GRPC_PORT}")
        and not rt_env.get("TETHER_GRPC_ADDR", "").startswith("127."),
        f"{RUNTIME}: TETHER_GRPC_ADDR must listen on the pod IP",
    )
    need(
        rt_env.get("TETHER_GRPC_MAX_CONNECTION_AGE_S") == "300",
        f"{RUNTIME}: max connection age != 300s",
    )

    gw = pod_spec(gateway)["containers"][0]
    need(
        (gw.get("livenessProbe") or {}).get("httpGet", {}).get("path") == "/healthz",
        f"{GATEWAY}: liveness != /healthz",
    )
    need(
        (gw.get("readinessProbe") or {}).get("httpGet", {}).get("path") == "/readyz",
        f"{GATEWAY}: readiness != /readyz",
    )
    gw_env = effective_env(docs, gw)
    need(gw_env.get("TETHER_HTTP_ADDR") == f"0.0.0.0:{HTTP_PORT}", f"{GATEWAY}: TETHER_HTTP_ADDR")
    need(
        gw_env.get("TETHER_RUNTIME_TARGET")
        == f"dns:///{HEADLESS}.{NAMESPACE}.svc.cluster.local:{GRPC_PORT}",
        f"{GATEWAY}: TETHER_RUNTIME_TARGET must be dns:/// on the headless Service",
    )

    # headless runtime Service
    need(headless["spec"].get("clusterIP") == "None", f"{HEADLESS}: not headless")
    need(
        selector_matches({"matchLabels": headless["spec"].get("selector")}, pod_labels(runtime))
        and headless["spec"].get("selector"),
        f"{HEADLESS}: selector misses runtime pods",
    )
    need(
        [p["port"] for p in headless["spec"]["ports"]] == [GRPC_PORT],
        f"{HEADLESS}: port != {GRPC_PORT}",
    )

    gsvc = find(docs, "Service", GATEWAY)
    need(
        gsvc
        and selector_matches({"matchLabels": gsvc[0]["spec"]["selector"]}, pod_labels(gateway)),
        f"{GATEWAY}: Service missing or misses gateway pods",
    )

    # ingress for SSE
    ann = ingress["metadata"].get("annotations") or {}
    for key, value in SSE_ANNOTATIONS.items():
        need(ann.get(key) == value, f"Ingress/{GATEWAY}: {key} != {value!r}")
    backends = [
        p["backend"]["service"]["name"]
        for r in ingress["spec"]["rules"]
        for p in r["http"]["paths"]
    ]
    need(
        backends and set(backends) == {GATEWAY},
        f"Ingress/{GATEWAY}: backend is not the gateway Service",
    )
    if overlay == "production":
        need(ingress["spec"].get("tls"), f"Ingress/{GATEWAY}: production needs TLS")

    # migration job
    mig = pod_spec(job)["containers"][0]
    need(mig.get("args") == ["migrate"], f"Job/{MIGRATE}: does not run `tether migrate`")
    need(mig.get("image") == rt.get("image"), f"Job/{MIGRATE}: image differs from the runtime's")

    problems += network_policy_problems(docs, runtime, gateway, job)
    return problems


def network_policy_problems(docs: list[Doc], runtime: Doc, gateway: Doc, job: Doc) -> list[str]:
    problems: list[str] = []
    rt_labels, gw_labels, job_labels = pod_labels(runtime), pod_labels(gateway), pod_labels(job)
    nps = find(docs, "NetworkPolicy")

    deny = [
        np
        for np in nps
        if np["spec"]["podSelector"] == {}
        and set(np["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
        and not np["spec"].get("ingress")
        and not np["spec"].get("egress")
    ]
    if not deny:
        problems.append("NetworkPolicy: no default deny (ingress and egress) for the namespace")

    # runtime ingress: gateway pods on 50051; only the monitoring namespace on the metrics port
    rt_ingress = [
        r
        for np in policies_selecting(docs, rt_labels)
        if "Ingress" in np["spec"].get("policyTypes", [])
        for r in np["spec"].get("ingress") or []
    ]
    if not rt_ingress:
        problems.append("NetworkPolicy: nothing lets the gateway reach the runtime")
    for rule in rt_ingress:
        peers = rule.get("from") or []
        if (
            rule_ports(rule) == {("TCP", RUNTIME_METRICS_PORT)}
            and peers
            and all(
                set(p) == {"namespaceSelector"}
                and p["namespaceSelector"].get("matchLabels")
                == {"kubernetes.io/metadata.name": "monitoring"}
                for p in peers
            )
        ):
            continue  # Prometheus scraping /metrics: no access to the API port
        if not peers or any(
            "namespaceSelector" in p
            or "ipBlock" in p
            or not selector_matches(p.get("podSelector"), gw_labels)
            or selector_matches(p.get("podSelector"), {"app.kubernetes.io/name": "other"})
            for p in peers
        ):
            problems.append("NetworkPolicy: runtime ingress admits pods other than the gateway")
        if rule_ports(rule) != {("TCP", GRPC_PORT)}:
            problems.append(f"NetworkPolicy: runtime ingress opens ports other than {GRPC_PORT}")

    # gateway ingress: the ingress controller on 8080
    gw_ingress = [
        r
        for np in policies_selecting(docs, gw_labels)
        if "Ingress" in np["spec"].get("policyTypes", [])
        for r in np["spec"].get("ingress") or []
    ]
    if not any(
        any(
            (p.get("namespaceSelector") or {})
            .get("matchLabels", {})
            .get("kubernetes.io/metadata.name")
            == "ingress-nginx"
            for p in r.get("from") or []
        )
        and ("TCP", HTTP_PORT) in rule_ports(r)
        for r in gw_ingress
    ):
        problems.append("NetworkPolicy: the ingress controller cannot reach the gateway on 8080")
    for r in gw_ingress:
        if not r.get("from") or rule_ports(r) != {("TCP", HTTP_PORT)}:
            problems.append("NetworkPolicy: gateway ingress is open beyond its HTTP port")

    # gateway egress to runtime
    if not any(
        any(selector_matches(p.get("podSelector"), rt_labels) for p in r.get("to") or [])
        and ("TCP", GRPC_PORT) in rule_ports(r)
        for np in policies_selecting(docs, gw_labels)
        for r in np["spec"].get("egress") or []
    ):
        problems.append("NetworkPolicy: the gateway cannot reach the runtime on 50051")

    # stores + DNS: all three tether workloads may, nothing else in the namespace may
    outsider = {"app.kubernetes.io/name": "something-else", "app.kubernetes.io/part-of": "other"}
    for port in (5432, 6379):
        openers = [
            np
            for np in nps
            if any(("TCP", port) in rule_ports(r) for r in np["spec"].get("egress") or [])
        ]
        for labels, who in (
            (rt_labels, "runtime"),
            (gw_labels, "gateway"),
            (job_labels, "migrate job"),
        ):
            if not any(selector_matches(np["spec"]["podSelector"], labels) for np in openers):
                problems.append(f"NetworkPolicy: {who} cannot reach port {port}")
        if any(selector_matches(np["spec"]["podSelector"], outsider) for np in openers):
            problems.append(f"NetworkPolicy: pods other than Tether's may reach port {port}")
    for labels, who in (
        (rt_labels, "runtime"),
        (gw_labels, "gateway"),
        (job_labels, "migrate job"),
    ):
        if not any(
            ("UDP", 53) in rule_ports(r)
            for np in policies_selecting(docs, labels)
            for r in np["spec"].get("egress") or []
        ):
            problems.append(f"NetworkPolicy: {who} cannot resolve DNS")
    return problems


# ----------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("overlays", nargs="*", help="overlay names (default: all)")
    ap.add_argument("--k8s-version", default=os.environ.get("TETHER_K8S_VERSION", K8S_VERSION))
    ap.add_argument(
        "--out", type=Path, help="also write each rendered overlay to DIR/<overlay>.yaml"
    )
    args = ap.parse_args(argv)

    selected = [OVERLAYS_DIR / n for n in args.overlays] if args.overlays else overlays()
    failed = False
    print(f"renderer: {' '.join(renderer())}; schemas: Kubernetes {args.k8s_version} (strict)")
    for path in selected:
        name = path.name
        try:
            text = render_text(path)
        except RenderError as err:
            print(f"[{name}] RENDER FAILED\n{err}")
            failed = True
            continue
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.yaml").write_text(text)
        docs = [d for d in yaml.safe_load_all(text) if d]
        errors = schema_errors(docs, args.k8s_version)
        problems = check(docs, name)
        status = "ok" if not errors and not problems else "FAILED"
        print(
            f"[{name}] {len(docs)} objects, {len(errors)} schema errors, "
            f"{len(problems)} contract problems: {status}"
        )
        for line in errors + problems:
            print(f"  - {line}")
        failed |= bool(errors or problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
