#!/usr/bin/env python3
"""Render every kustomize overlay of deploy/k8s and check it without a cluster.

1. Render with a real kustomize: the standalone `kustomize` binary if present, else
   `kubectl kustomize` (kubectl embeds kustomize v5).
2. Validate every rendered object against the OpenAPI-derived JSON schemas of a pinned
   Kubernetes version (the `kubernetes-validate` package ships them; strict mode rejects unknown
   fields, which catches typos like `readinesProbe`).
3. Check Tether's operational contract: replicas, probes, headless runtime Service, drain timing,
   security context, secrets by reference, NetworkPolicies, HPA/PDB, SSE ingress annotations;
   and least privilege (issue #16): no dev setting in the base or production, each component
   holding only its own secrets (no database credentials in the gateway, no signing key in the
   runtime or the migrate Job), runtime gRPC over TLS in production, NetworkPolicies evaluated
   for who may reach what (no gateway -> Postgres; metrics and OTLP only from/to the monitoring
   namespace), and an Ingress that routes only the UI and the API (never /metrics).

Usage:  uv run python deploy/k8s/validate.py [--k8s-version 1.31] [--out DIR] [OVERLAY ...]
Exit status 0 when every overlay renders, validates and passes every check.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
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
GRPC_HEALTH_PORT = 50052  # plaintext grpc.health.v1 alone, for the kubelet's probes
RUNTIME_METRICS_PORT = 9464
GATEWAY_METRICS_PORT = 9464
METRICS_PORT = 9464
HTTP_PORT = 8080
POSTGRES_PORT = 5432
REDIS_PORT = 6379
OTLP_PORTS = (4317, 4318)
APP_UID = 10001
# The namespace Prometheus and the OpenTelemetry collector run in, by the label the API server
# sets on every namespace (it cannot be forged by labelling another namespace).
MONITORING_NS_LABEL = {"kubernetes.io/metadata.name": "monitoring"}
# Least privilege: the secrets each component reads (secretKeyRef), from its own Secret.
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
# Settings only `tether dev` (and tests) may set.
DEV_ONLY_SETTINGS = ("TETHER_DEV_LOGIN", "TETHER_EMBEDDED_STORES", "TETHER_CONFORMANCE_PLAN")
# What the Ingress must route (the web UI, its files, the API) and must not.
INGRESS_ROUTED = ("/", "/static/app.js", "/static/client/index.js", "/v1/runs", "/v1/session")
INGRESS_UNROUTED = ("/metrics", "/openapi.json", "/healthz", "/readyz", "/debug", "/metrics/x")
SSE_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "IngressClass"}
# Internal services that call the runtime's gRPC API directly carry this pod label, in namespace
# tether or in a namespace a cluster admin labelled with RUNTIME_CLIENTS_NS_LABEL (README).
RUNTIME_CLIENT_LABEL = {"tether.dev/runtime-client": "true"}
RUNTIME_CLIENTS_NS_LABEL = {"tether.dev/runtime-clients": "allowed"}
# The model providers a production runtime may use, and the setting holding each one's key file.
MODEL_KEY_FILE = {
    "openai": "TETHER_OPENAI_API_KEY_FILE",
    "anthropic": "TETHER_ANTHROPIC_API_KEY_FILE",
}
MODEL_KEY_SECRET_NAME = "tether-model-key"
README = K8S_DIR / "README.md"

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
            problems.extend(secret_problems(docs, w, c, overlay))
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
            for name in DEV_ONLY_SETTINGS:
                need(name not in env, f"{cname}: sets {name}, which only `tether dev` may")

    if overlay == "production":
        need(
            not find(docs, "Secret"),
            "production overlay must not render a Secret (provided by the cluster)",
        )
        problems.extend(dev_setting_problems(docs))
        problems.extend(runtime_tls_problems(docs, runtime, gateway))

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
            (rt.get(probe) or {}).get("grpc", {}).get("port") == GRPC_HEALTH_PORT,
            f"{RUNTIME}: {probe} is not a native grpc probe on the health port {GRPC_HEALTH_PORT}",
        )
    rt_env = effective_env(docs, rt)
    need(
        rt_env.get("TETHER_GRPC_HEALTH_ADDR") == f"0.0.0.0:{GRPC_HEALTH_PORT}",
        f"{RUNTIME}: TETHER_GRPC_HEALTH_ADDR must serve the probes' port {GRPC_HEALTH_PORT}",
    )
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
    for path in INGRESS_ROUTED:
        need(ingress_routes(ingress, path), f"Ingress/{GATEWAY}: does not route {path}")
    for path in INGRESS_UNROUTED:
        need(not ingress_routes(ingress, path), f"Ingress/{GATEWAY}: routes {path} to the public")

    # migration job
    mig = pod_spec(job)["containers"][0]
    need(mig.get("args") == ["migrate"], f"Job/{MIGRATE}: does not run `tether migrate`")
    need(mig.get("image") == rt.get("image"), f"Job/{MIGRATE}: image differs from the runtime's")

    problems += network_policy_problems(docs, runtime, gateway, job)
    problems += scrape_problems(docs)
    problems += schema_wait_problems(runtime, job)
    problems += model_problems(docs, runtime, overlay)
    problems += processes_problems(docs, overlay)
    return problems


# ----------------------------------------------------------------------------- used at scale


def scrape_problems(docs: list[Doc]) -> list[str]:
    """Every Deployment that serves metrics (TETHER_METRICS_ADDR) is annotated to be scraped on
    that port: the runtime's queue depth is what should drive its scaling."""
    problems: list[str] = []
    for dep in find(docs, "Deployment"):
        name = dep["metadata"]["name"]
        main = pod_spec(dep)["containers"][0]
        addr = effective_env(docs, main).get("TETHER_METRICS_ADDR", "")
        if not addr:
            continue
        port = addr.rpartition(":")[2]
        ann = dep["spec"]["template"]["metadata"].get("annotations") or {}
        if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != port:
            problems.append(
                f"{name}: serves metrics on :{port} but its pods are not annotated "
                f"prometheus.io/scrape=true, prometheus.io/port={port} (they would not be scraped)"
            )
        if int(port) not in {p.get("containerPort") for p in main.get("ports", [])}:
            problems.append(f"{name}: metrics port {port} is not a containerPort")
    return problems


def schema_wait_problems(runtime: Doc, job: Doc) -> list[str]:
    """The migrate Job and the Deployments are applied together: the runtime's pods (the ones
    using the database; a gateway is ready only once a runtime is) must wait for the schema in
    an init container running `tether migrate --check --wait`, with the Job's image."""
    inits = pod_spec(runtime).get("initContainers") or []
    job_image = pod_spec(job)["containers"][0].get("image")
    for c in inits:
        args = c.get("args") or []
        if args[:2] == ["migrate", "--check"] and "--wait" in args:
            if c.get("image") != job_image:
                return [f"{RUNTIME}: init container {c['name']} runs another image than the Job"]
            return []
    return [
        f"{RUNTIME}: no init container waits for the schema (`tether migrate --check --wait`): "
        "pods started with the migrate Job would serve before the schema exists"
    ]


def model_problems(docs: list[Doc], runtime: Doc, overlay: str) -> list[str]:
    """The runtime is told which model provider to use (TETHER_MODEL), and a provider's key
    comes from the Secret tether-model-key mounted as a file (never an env value); production
    uses a provider (it refuses a scripted demo model) and needs that Secret."""
    rt = pod_spec(runtime)["containers"][0]
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
    volume = _mounted_from(runtime, rt, path) if path else None
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


def _cpus(quantity: object) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def processes_problems(docs: list[Doc], overlay: str) -> list[str]:
    """Each Deployment says how many processes a pod runs (TETHER_PROCESSES) and its CPU limit
    gives each one a core: processes = limits.cpu rounded up; in production requests = limits
    (no process throttled, the HPA's CPU target measured against what they can use)."""
    problems: list[str] = []
    for dep in find(docs, "Deployment"):
        name = dep["metadata"]["name"]
        main = pod_spec(dep)["containers"][0]
        raw = effective_env(docs, main).get("TETHER_PROCESSES", "")
        if not raw.isdigit() or int(raw) < 1:
            problems.append(f"{name}: TETHER_PROCESSES={raw!r}: set the processes per pod")
            continue
        res = main.get("resources") or {}
        limit = _cpus((res.get("limits") or {}).get("cpu", 0))
        request = _cpus((res.get("requests") or {}).get("cpu", 0))
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


# ----------------------------------------------------------------------------- least privilege


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
    cname = f"{workload['kind']}/{wname} container {container['name']}"
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
            secret.startswith(wname + "-") or (wname == RUNTIME and secret == "tether-model-key")
        ):
            problems.append(f"{cname}: mounts Secret {secret}, which is not its own")
    return problems


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
            cname = f"{w['kind']}/{w['metadata']['name']} container {c['name']}"
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


def _mounted_from(workload: Doc, container: Doc, path: str) -> Doc | None:
    """The volume whose mount holds `path`, if any."""
    volumes: dict[str, Doc] = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(root) and mount["name"] in volumes:
            return volumes[mount["name"]]
    return None


def runtime_tls_problems(docs: list[Doc], runtime: Doc, gateway: Doc) -> list[str]:
    """Production: the runtime serves gRPC over TLS from a mounted Secret, without reflection;
    the gateway verifies it with a CA bundle and never sees the runtime's key."""
    problems: list[str] = []
    rt = pod_spec(runtime)["containers"][0]
    env = effective_env(docs, rt)
    tls_secret = ""
    for key in ("TETHER_GRPC_TLS_CERT_FILE", "TETHER_GRPC_TLS_KEY_FILE"):
        path = env.get(key, "")
        volume = _mounted_from(runtime, rt, path) if path else None
        if not path:
            problems.append(f"{RUNTIME}: {key} is not set: runtime gRPC would be plaintext")
        elif volume is None or "secret" not in volume:
            problems.append(f"{RUNTIME}: {key}={path} is not in a mounted Secret")
        else:
            tls_secret = volume["secret"]["secretName"]
    if env.get("TETHER_GRPC_REFLECTION", "0").lower() in ("1", "true", "yes", "on"):
        problems.append(f"{RUNTIME}: TETHER_GRPC_REFLECTION is on in production")
    gw = pod_spec(gateway)["containers"][0]
    ca = effective_env(docs, gw).get("TETHER_RUNTIME_TLS_CA_FILE", "")
    volume = _mounted_from(gateway, gw, ca) if ca else None
    if not ca:
        problems.append(
            f"{GATEWAY}: TETHER_RUNTIME_TLS_CA_FILE is not set: plaintext to the runtime"
        )
    elif volume is None or not ({"secret", "configMap"} & set(volume)):
        problems.append(f"{GATEWAY}: TETHER_RUNTIME_TLS_CA_FILE={ca} is not in a mounted volume")
    for vol in pod_spec(gateway).get("volumes", []):
        if tls_secret and (vol.get("secret") or {}).get("secretName") == tls_secret:
            problems.append(f"{GATEWAY}: mounts the runtime's TLS Secret {tls_secret} (its key)")
    return problems


def _path_elements(path: str) -> list[str]:
    return [e for e in path.split("/") if e]


def ingress_routes(ingress: Doc, path: str) -> bool:
    """Whether the Ingress sends `path` to a backend (Kubernetes Exact / Prefix matching)."""
    for rule in ingress["spec"].get("rules", []):
        for p in (rule.get("http") or {}).get("paths", []):
            kind, want = p.get("pathType", "ImplementationSpecific"), p.get("path", "/")
            if kind == "Exact" and path == want:
                return True
            if kind == "Prefix":
                prefix = _path_elements(want)
                if _path_elements(path)[: len(prefix)] == prefix:
                    return True
            if kind == "ImplementationSpecific" and path.startswith(want):
                return True
    return bool(ingress["spec"].get("defaultBackend"))


# ----------------------------------------------------------------------------- network policies


@dataclass(frozen=True)
class Peer:
    """One end of a connection: a pod (namespace + labels) or an address outside the cluster."""

    what: str
    namespace: str | None = None  # None: outside the cluster
    labels: Mapping[str, str] = field(default_factory=dict)
    ip: str = ""
    # Labels its namespace carries besides its name (e.g. one admitted for internal callers).
    ns_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def namespace_labels(self) -> dict[str, str]:
        if not self.namespace:
            return {}
        return {**self.ns_labels, "kubernetes.io/metadata.name": self.namespace}


def pod(what: str, namespace: str, labels: Mapping[str, str]) -> Peer:
    return Peer(what, namespace, dict(labels))


def _kv(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _peer_matches(rule_peer: Mapping[str, Any], peer: Peer, policy_ns: str) -> bool:
    if "ipBlock" in rule_peer:
        if not peer.ip:
            return False
        block = rule_peer["ipBlock"]
        ip = ipaddress.ip_address(peer.ip)
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(e) for e in block.get("except") or []
        )
    if peer.namespace is None:
        return False  # pod and namespace selectors select pods in the cluster only
    if "namespaceSelector" in rule_peer:
        if not selector_matches(rule_peer["namespaceSelector"], peer.namespace_labels):
            return False
    elif peer.namespace != policy_ns:
        return False
    if "podSelector" in rule_peer:
        return selector_matches(rule_peer["podSelector"], peer.labels)
    return True


def _port_matches(rule: Mapping[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        if isinstance(p["port"], int) and p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False


def allowed(
    docs: Iterable[Doc],
    direction: str,
    subject: Mapping[str, str],
    other: Peer,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """NetworkPolicy semantics for a pod of namespace `tether` with labels `subject`: may it send
    (direction "Egress") to `other`, or receive (direction "Ingress") from it, on `port`? Not
    selected by any policy of that direction: yes; else only if a rule of one admits it."""
    key = "egress" if direction == "Egress" else "ingress"
    peers_key = "to" if direction == "Egress" else "from"
    selecting = [
        np
        for np in find(docs, "NetworkPolicy")
        if np["metadata"].get("namespace", NAMESPACE) == NAMESPACE
        and selector_matches(np["spec"]["podSelector"], subject)
        and direction in np["spec"].get("policyTypes", ["Ingress"])
    ]
    if not selecting:
        return True
    for np in selecting:
        for rule in np["spec"].get(key) or []:
            peers = rule.get(peers_key)
            if not _port_matches(rule, port, protocol):
                continue
            if not peers or any(_peer_matches(p, other, NAMESPACE) for p in peers):
                return True
    return False


def network_policy_problems(docs: list[Doc], runtime: Doc, gateway: Doc, job: Doc) -> list[str]:
    """Who may reach what, evaluated on the rendered policies for the peers that matter."""
    problems: list[str] = []
    rt, gw, mig = pod_labels(runtime), pod_labels(gateway), pod_labels(job)
    deny = [
        np
        for np in find(docs, "NetworkPolicy")
        if np["spec"]["podSelector"] == {}
        and set(np["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
        and not np["spec"].get("ingress")
        and not np["spec"].get("egress")
    ]
    if not deny:
        problems.append("NetworkPolicy: no default deny (ingress and egress) for the namespace")
    outsider = {"app.kubernetes.io/name": "something-else", "app.kubernetes.io/part-of": "other"}
    monitoring = pod("Prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
    collector = pod("the OTLP collector", "monitoring", {"app": "otel-collector"})
    elsewhere = pod("a pod of another namespace", "default", {"app": "anything"})
    nginx = pod("ingress-nginx", "ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
    runtime_pod = Peer("the runtime", NAMESPACE, rt)
    gateway_pod = Peer("the gateway", NAMESPACE, gw)
    migrate_pod = Peer("the migrate job", NAMESPACE, mig)
    outsider_pod = Peer("a non-Tether pod of the namespace", NAMESPACE, outsider)
    dns = pod("kube-dns", "kube-system", {"k8s-app": "kube-dns"})
    public = Peer("a public address", ip="34.120.10.20")
    private = Peer("a private address", ip="10.20.0.5")
    in_cluster_store = pod("a store pod", "tether-deps", {"app.kubernetes.io/name": "postgresql"})
    stores = (private, public, in_cluster_store)

    def must(ok: bool, msg: str) -> None:
        if not ok:
            problems.append(f"NetworkPolicy: {msg}")

    # ingress
    must(
        allowed(docs, "Ingress", gw, nginx, HTTP_PORT),
        "the ingress controller cannot reach the gateway on 8080",
    )
    for src in (elsewhere, monitoring, outsider_pod, runtime_pod):
        must(
            not allowed(docs, "Ingress", gw, src, HTTP_PORT),
            f"{src.what} may reach the gateway's API port {HTTP_PORT} (gateway ingress is open beyond its HTTP port)",
        )
    must(
        allowed(docs, "Ingress", rt, gateway_pod, GRPC_PORT),
        "nothing lets the gateway reach the runtime",
    )
    for src in (outsider_pod, migrate_pod, monitoring, elsewhere, nginx):
        must(
            not allowed(docs, "Ingress", rt, src, GRPC_PORT),
            f"runtime ingress admits pods other than the gateway ({src.what}) on {GRPC_PORT}",
        )
    # Internal services call the runtime directly: labelled pods, here or in an admitted namespace.
    caller = pod(
        "a labelled internal caller of an unadmitted namespace", "billing", RUNTIME_CLIENT_LABEL
    )
    admitted = Peer(
        "a labelled internal caller",
        "billing",
        RUNTIME_CLIENT_LABEL,
        ns_labels=RUNTIME_CLIENTS_NS_LABEL,
    )
    local_caller = Peer(
        "a labelled internal caller of the namespace", NAMESPACE, RUNTIME_CLIENT_LABEL
    )
    must(
        allowed(docs, "Ingress", rt, admitted, GRPC_PORT),
        f"internal callers (label {_kv(RUNTIME_CLIENT_LABEL)} in a namespace labelled "
        f"{_kv(RUNTIME_CLIENTS_NS_LABEL)}) cannot reach the runtime on {GRPC_PORT}",
    )
    must(
        allowed(docs, "Ingress", rt, local_caller, GRPC_PORT),
        f"internal callers of namespace {NAMESPACE} cannot reach the runtime on {GRPC_PORT}",
    )
    unlabelled_in_admitted = Peer(
        "an unlabelled pod of an admitted namespace", "billing", {"app": "x"},
        ns_labels=RUNTIME_CLIENTS_NS_LABEL,
    )  # fmt: skip
    for src in (caller, unlabelled_in_admitted):
        must(
            not allowed(docs, "Ingress", rt, src, GRPC_PORT),
            f"runtime ingress admits pods other than the gateway ({src.what}) on {GRPC_PORT}",
        )
    for src in (admitted, local_caller):
        must(
            not allowed(docs, "Ingress", rt, src, GRPC_HEALTH_PORT)
            and not allowed(docs, "Ingress", rt, src, METRICS_PORT),
            f"internal callers may reach the runtime beyond its gRPC port {GRPC_PORT}",
        )
    for src in (outsider_pod, gateway_pod, elsewhere):
        must(
            not allowed(docs, "Ingress", rt, src, GRPC_HEALTH_PORT),
            f"{src.what} may reach the runtime's plaintext health port {GRPC_HEALTH_PORT} "
            "(only the kubelet, which policies do not govern, needs it)",
        )
    for labels, who in ((gw, "gateway"), (rt, "runtime")):
        must(
            allowed(docs, "Ingress", labels, monitoring, METRICS_PORT),
            f"the monitoring namespace cannot scrape the {who}'s metrics port {METRICS_PORT}",
        )
        for src in (elsewhere, nginx, outsider_pod):
            must(
                not allowed(docs, "Ingress", labels, src, METRICS_PORT),
                f"{src.what} may reach the {who}'s metrics port {METRICS_PORT} (only the monitoring namespace may)",
            )

    # egress: the gateway -> runtime; stores by component; DNS; OTLP only to monitoring
    must(
        allowed(docs, "Egress", gw, runtime_pod, GRPC_PORT),
        "the gateway cannot reach the runtime on 50051",
    )
    for store in stores:
        must(
            allowed(docs, "Egress", rt, store, POSTGRES_PORT),
            f"runtime cannot reach port {POSTGRES_PORT} ({store.what})",
        )
        must(
            allowed(docs, "Egress", mig, store, POSTGRES_PORT),
            f"migrate job cannot reach port {POSTGRES_PORT} ({store.what})",
        )
        must(
            not allowed(docs, "Egress", gw, store, POSTGRES_PORT),
            f"the gateway may reach Postgres (port {POSTGRES_PORT} at {store.what}): it holds no database credentials and needs no route",
        )
        must(
            allowed(docs, "Egress", rt, store, REDIS_PORT),
            f"runtime cannot reach port {REDIS_PORT} ({store.what})",
        )
        must(
            allowed(docs, "Egress", gw, store, REDIS_PORT),
            f"gateway cannot reach port {REDIS_PORT} ({store.what})",
        )
        must(
            not allowed(docs, "Egress", mig, store, REDIS_PORT),
            f"the migrate job may reach Redis (port {REDIS_PORT}), which it does not use",
        )
        for port in (POSTGRES_PORT, REDIS_PORT):
            must(
                not allowed(docs, "Egress", outsider, store, port),
                f"pods other than Tether's may reach port {port}",
            )
    for labels, who in ((rt, "runtime"), (gw, "gateway"), (mig, "migrate job")):
        must(allowed(docs, "Egress", labels, dns, 53, "UDP"), f"{who} cannot resolve DNS")
        for port in OTLP_PORTS:
            must(
                allowed(docs, "Egress", labels, collector, port),
                f"{who} cannot reach the OTLP collector in the monitoring namespace on {port}",
            )
            for dest in (elsewhere, public, private):
                must(
                    not allowed(docs, "Egress", labels, dest, port),
                    f"{who} may send OTLP ({port}) to {dest.what} (only to the monitoring namespace)",
                )
    must(
        allowed(docs, "Egress", rt, public, 443),
        "the runtime cannot reach the model API / IdP on 443",
    )
    must(allowed(docs, "Egress", gw, public, 443), "the gateway cannot reach the IdP on 443")
    must(
        not allowed(docs, "Egress", gw, public, 80), "the gateway may reach the internet beyond 443"
    )
    must(not allowed(docs, "Egress", mig, public, 443), "the migrate job may reach the internet")
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
    # The base is what production runs: no dev setting, no secret (the overlays add their own).
    base_problems = dev_setting_problems(render(K8S_DIR / "base"))
    print(
        f"[base] {len(base_problems)} dev settings or secrets: {'FAILED' if base_problems else 'ok'}"
    )
    for line in base_problems:
        print(f"  - {line}")
    failed |= bool(base_problems)
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
        problems = check(docs, name) + readme_problems(docs, README.read_text())
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
