"""Each of Tether's rules for its manifests (deploy/k8s/tether_k8s/rules) has teeth: the shipped
render keeps it, and a render that breaks it fails with that rule's message. The rules the tests
in test_k8s_manifests.py already break are not repeated here."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# The manifests are rendered by kustomize (a process): `make test` only, not test-fast.
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
Doc = dict[str, Any]
Docs = list[Doc]
Mutation = Callable[[ModuleType, Docs], object]


def _main(kv: ModuleType, docs: Docs, name: str, kind: str = "Deployment") -> Doc:
    container: Doc = kv.pod_spec(kv.one(docs, kind, name))["containers"][0]
    return container


def _init(kv: ModuleType, docs: Docs) -> Doc:
    container: Doc = kv.pod_spec(kv.one(docs, "Deployment", kv.RUNTIME))["initContainers"][0]
    return container


def _set_env(container: Doc, name: str, value: str) -> None:
    container["env"] = [e for e in container["env"] if e["name"] != name]
    container["env"].append({"name": name, "value": value})


def _drop_env(container: Doc, name: str) -> None:
    container["env"] = [e for e in container["env"] if e["name"] != name]


def _env(container: Doc, name: str) -> Doc:
    [var] = [e for e in container["env"] if e["name"] == name]
    return var


def _spec(kv: ModuleType, docs: Docs, kind: str, name: str) -> Doc:
    spec: Doc = kv.one(docs, kind, name)["spec"]
    return spec


def _policy(kv: ModuleType, docs: Docs, name: str) -> Doc:
    return _spec(kv, docs, "NetworkPolicy", name)


def _config(kv: ModuleType, docs: Docs) -> dict[str, str]:
    [cm] = kv.find(docs, "ConfigMap")
    data: dict[str, str] = cm["data"]
    return data


def _sc(container: Doc) -> Doc:
    sc: Doc = container["securityContext"]
    return sc


def _extra_job(kv: ModuleType, docs: Docs) -> None:
    job = copy.deepcopy(kv.one(docs, "Job", kv.MIGRATE))
    job["metadata"]["name"] = "tether-extra"
    docs.append(job)


def _gateway_secret(kv: ModuleType, docs: Docs) -> Doc:
    [secret] = [s for s in kv.find(docs, "Secret") if s["metadata"]["name"].startswith(kv.GATEWAY)]
    return secret


GW = "Deployment/tether-gateway container gateway"
RT = "Deployment/tether-runtime container runtime"

CASES: list[Any] = [
    # the objects every rule reads
    pytest.param(
        "dev",
        lambda kv, d: d.remove(kv.one(d, "Service", kv.HEADLESS)),
        "expected exactly one Service/tether-runtime-headless, found 0",
        id="one-of-each",
    ),
    # namespace
    pytest.param(
        "dev",
        lambda kv, d: kv.one(d, "Service", kv.GATEWAY)["metadata"].__setitem__(
            "namespace", "default"
        ),
        "Service/tether-gateway is not in namespace tether",
        id="namespace",
    ),
    # scaling
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "HorizontalPodAutoscaler", kv.GATEWAY).__setitem__(
            "minReplicas", 1
        ),
        "tether-gateway: HPA minReplicas < 2",
        id="hpa-min",
    ),
    pytest.param(
        "production",
        lambda kv, d: _spec(kv, d, "HorizontalPodAutoscaler", kv.RUNTIME).__setitem__(
            "maxReplicas", _spec(kv, d, "HorizontalPodAutoscaler", kv.RUNTIME)["minReplicas"]
        ),
        "tether-runtime: HPA cannot scale out",
        id="hpa-max",
    ),
    pytest.param(
        "dev",
        lambda kv, d: kv.one(d, "HorizontalPodAutoscaler", kv.GATEWAY).__setitem__(
            "apiVersion", "autoscaling/v1"
        ),
        "tether-gateway: needs exactly one autoscaling/v2 HPA",
        id="hpa-version",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "PodDisruptionBudget", kv.RUNTIME).pop("maxUnavailable"),
        "tether-runtime: PDB has no budget",
        id="pdb-budget",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "Deployment", kv.GATEWAY)["selector"]["matchLabels"].__setitem__(
            "app.kubernetes.io/name", "other"
        ),
        "tether-gateway: selector misses its pods",
        id="deployment-selector",
    ),
    # security
    pytest.param(
        "dev",
        lambda kv, d: kv.pod_spec(kv.one(d, "Job", kv.MIGRATE)).__setitem__(
            "automountServiceAccountToken", True
        ),
        "Job/tether-migrate: mounts an SA token",
        id="sa-token",
    ),
    pytest.param(
        "production",
        lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.GATEWAY)).pop("enableServiceLinks"),
        "Deployment/tether-gateway: service links would inject TETHER_* variables",
        id="service-links",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _sc(_main(kv, d, kv.GATEWAY)).__setitem__("runAsNonRoot", False),
        f"{GW}: runAsNonRoot",
        id="run-as-non-root",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _sc(_init(kv, d)).__setitem__("runAsUser", 0),
        "Deployment/tether-runtime container wait-for-schema: runAsUser != 10001",
        id="run-as-user",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _sc(_main(kv, d, kv.RUNTIME)).__setitem__("allowPrivilegeEscalation", True),
        f"{RT}: allowPrivilegeEscalation",
        id="privilege-escalation",
    ),
    pytest.param(
        "production",
        lambda kv, d: _sc(_main(kv, d, kv.MIGRATE, "Job")).__setitem__("privileged", True),
        "Job/tether-migrate container migrate: privileged",
        id="privileged",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _sc(_main(kv, d, kv.GATEWAY)).__setitem__(
            "seccompProfile", {"type": "Unconfined"}
        ),
        f"{GW}: seccompProfile is not RuntimeDefault",
        id="seccomp",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY).__setitem__(
            "image", "registry.example.com/tether/tether-gateway:latest"
        ),
        f"{GW}: image 'registry.example.com/tether/tether-gateway:latest' has no pinned tag",
        id="image-latest",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY).__setitem__(
            "image", "registry.example.com:5000/tether/tether-gateway"
        ),
        "has no pinned tag",
        id="image-untagged",
    ),
    # resources
    pytest.param(
        "dev",
        lambda kv, d: _init(kv, d)["resources"]["limits"].pop("memory"),
        "Deployment/tether-runtime container wait-for-schema: no limits.memory",
        id="limits-memory",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["resources"]["requests"].pop("cpu"),
        f"{GW}: no requests.cpu",
        id="requests-cpu",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.RUNTIME)["resources"]["limits"].__setitem__("cpu", "2500m"),
        "tether-runtime: TETHER_PROCESSES=2 does not match limits.cpu 2.5 (one process per CPU)",
        id="processes-vs-millicores",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["resources"]["limits"].__setitem__("cpu", "1500m"),
        "tether-gateway: requests.cpu 2 != limits.cpu 1.5 in production",
        id="requests-vs-limits-millicores",
    ),
    # credentials (least privilege)
    pytest.param(
        "dev",
        _extra_job,
        "Job/tether-extra container migrate: not a Tether component (no Secret of its own)",
        id="not-a-component",
    ),
    pytest.param(
        "production",
        lambda kv, d: _drop_env(_main(kv, d, kv.RUNTIME), "DATABASE_URL"),
        f"{RT}: DATABASE_URL is not a secretKeyRef",
        id="secret-not-a-ref",
    ),
    pytest.param(
        "production",
        lambda kv, d: _env(_main(kv, d, kv.GATEWAY), "REDIS_URL")["valueFrom"][
            "secretKeyRef"
        ].__setitem__("name", "tether-runtime-secrets"),
        f"{GW}: reads Secret tether-runtime-secrets, not its own tether-gateway-secrets",
        id="secret-of-another",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _env(_main(kv, d, kv.RUNTIME), "REDIS_URL")["valueFrom"][
            "secretKeyRef"
        ].__setitem__("name", "tether-runtime-secrets"),
        f"{RT}: Secret tether-runtime-secrets is not rendered",
        id="secret-not-rendered",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["env"].append(
            {
                "name": "DATABASE_URL",
                "valueFrom": {
                    "secretKeyRef": {"name": "tether-gateway-secrets", "key": "DATABASE_URL"}
                },
            }
        ),
        f"{GW}: holds DATABASE_URL, which this component must not have",
        id="forbidden-key",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.RUNTIME)["env"].append(
            {
                "name": "TETHER_JWT_SECRET",
                "valueFrom": {
                    "secretKeyRef": {"name": "tether-runtime-secrets", "key": "TETHER_JWT_SECRET"}
                },
            }
        ),
        f"{RT}: holds TETHER_JWT_SECRET, which this component must not have",
        id="signing-key-in-production",
    ),
    pytest.param(
        "dev",
        lambda kv, d: (
            _main(kv, d, kv.MIGRATE, "Job")
            .setdefault("envFrom", [])
            .append({"secretRef": {"name": "tether-migrate-secrets"}})
        ),
        "Job/tether-migrate container migrate: envFrom a Secret (every key of it)",
        id="env-from-secret",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _gateway_secret(kv, d)["data"].__setitem__("DATABASE_URL", "eA=="),
        f"{GW}: its Secret tether-gateway-secrets-",
        id="secret-holds-forbidden-key",
    ),
    pytest.param(
        "dev",
        lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.GATEWAY))["volumes"].append(
            {"name": "x", "secret": {"secretName": "tether-model-key"}}
        ),
        f"{GW}: mounts Secret tether-model-key, which is not its own",
        id="mounts-another-secret",
    ),
    # settings
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["envFrom"].append(
            {"configMapRef": {"name": "nowhere"}}
        ),
        f"{GW}: ConfigMap nowhere missing",
        id="configmap-missing",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _set_env(_main(kv, d, kv.RUNTIME), "TETHER_EMBEDDED_STORES", "1"),
        f"{RT}: sets TETHER_EMBEDDED_STORES, which only `tether dev` may",
        id="dev-only-setting",
    ),
    # lifecycle
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY).pop("lifecycle"),
        "tether-gateway: no preStop sleep before SIGTERM",
        id="prestop",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.RUNTIME).pop("startupProbe"),
        "tether-runtime: no startupProbe",
        id="startup-probe",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["livenessProbe"].update(
            periodSeconds=5, failureThreshold=2
        ),
        "tether-gateway: liveness could restart a draining pod before its grace period ends",
        id="liveness-vs-grace",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["livenessProbe"]["httpGet"].__setitem__("path", "/"),
        "tether-gateway: liveness != /healthz",
        id="gateway-liveness",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.GATEWAY)["readinessProbe"]["httpGet"].__setitem__(
            "path", "/healthz"
        ),
        "tether-gateway: readiness != /readyz",
        id="gateway-readiness",
    ),
    # services and addresses
    pytest.param(
        "dev",
        lambda kv, d: _set_env(_main(kv, d, kv.RUNTIME), "TETHER_GRPC_HEALTH_ADDR", "0.0.0.0:9000"),
        "tether-runtime: TETHER_GRPC_HEALTH_ADDR must serve the probes' port 50052",
        id="health-addr",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _set_env(_main(kv, d, kv.RUNTIME), "TETHER_GRPC_ADDR", "127.0.0.1:50051"),
        "tether-runtime: TETHER_GRPC_ADDR must listen on the pod IP",
        id="grpc-addr",
    ),
    pytest.param(
        "production",
        lambda kv, d: _set_env(
            _main(kv, d, kv.RUNTIME), "TETHER_GRPC_MAX_CONNECTION_AGE_S", "3600"
        ),
        "tether-runtime: max connection age != 300s",
        id="max-connection-age",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _set_env(_main(kv, d, kv.GATEWAY), "TETHER_HTTP_ADDR", "127.0.0.1:8080"),
        "tether-gateway: TETHER_HTTP_ADDR",
        id="http-addr",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _set_env(
            _main(kv, d, kv.GATEWAY), "TETHER_RUNTIME_TARGET", "tether-runtime:50051"
        ),
        "tether-gateway: TETHER_RUNTIME_TARGET must be dns:/// on the headless Service",
        id="runtime-target",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "Service", kv.HEADLESS).__setitem__(
            "selector", {"app.kubernetes.io/name": "other"}
        ),
        "tether-runtime-headless: selector misses runtime pods",
        id="headless-selector",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "Service", kv.HEADLESS)["ports"].append(
            {"name": "metrics", "port": 9464}
        ),
        "tether-runtime-headless: port != 50051",
        id="headless-port",
    ),
    pytest.param(
        "production",
        lambda kv, d: d.remove(kv.one(d, "Service", kv.GATEWAY)),
        "tether-gateway: Service missing or misses gateway pods",
        id="gateway-service",
    ),
    # ingress
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "Ingress", kv.GATEWAY)["rules"][0]["http"]["paths"][2][
            "backend"
        ]["service"].__setitem__("name", "tether-runtime-headless"),
        "Ingress/tether-gateway: backend is not the gateway Service",
        id="ingress-backend",
    ),
    pytest.param(
        "production",
        lambda kv, d: _spec(kv, d, "Ingress", kv.GATEWAY).pop("tls"),
        "Ingress/tether-gateway: production needs TLS",
        id="ingress-tls",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _spec(kv, d, "Ingress", kv.GATEWAY)["rules"][0]["http"]["paths"][
            2
        ].__setitem__("path", "/v1/runs/"),
        "Ingress/tether-gateway: does not route /v1/session",
        id="ingress-unrouted",
    ),
    pytest.param(
        "production",
        lambda kv, d: _spec(kv, d, "Ingress", kv.GATEWAY)["rules"][0]["http"]["paths"][
            0
        ].__setitem__("pathType", "Prefix"),
        "Ingress/tether-gateway: routes /metrics to the public",
        id="ingress-metrics",
    ),
    # migration
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.MIGRATE, "Job").__setitem__("args", ["serve"]),
        "Job/tether-migrate: does not run `tether migrate`",
        id="job-args",
    ),
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.MIGRATE, "Job").__setitem__(
            "image", "registry.example.com/tether/tether-runtime:0.0.9"
        ),
        "Job/tether-migrate: image differs from the runtime's",
        id="job-image",
    ),
    pytest.param(
        "dev",
        lambda kv, d: _init(kv, d).__setitem__(
            "image", "registry.example.com/tether/tether-runtime:0.0.9"
        ),
        "tether-runtime: init container wait-for-schema runs another image than the Job",
        id="schema-wait-image",
    ),
    # metrics
    pytest.param(
        "dev",
        lambda kv, d: _main(kv, d, kv.GATEWAY).__setitem__(
            "ports", [p for p in _main(kv, d, kv.GATEWAY)["ports"] if p["name"] != "metrics"]
        ),
        "tether-gateway: metrics port 9464 is not a containerPort",
        id="metrics-port",
    ),
    # the model key
    pytest.param(
        "production",
        lambda kv, d: _main(kv, d, kv.RUNTIME)["env"].append(
            {
                "name": "TETHER_OPENAI_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": "tether-runtime-secrets", "key": "openai"}},
            }
        ),
        "tether-runtime: the openai key is an env variable, not a mounted file",
        id="model-key-env",
    ),
    # runtime TLS (production)
    pytest.param(
        "production",
        lambda kv, d: _drop_env(_main(kv, d, kv.RUNTIME), "TETHER_GRPC_TLS_CERT_FILE"),
        "tether-runtime: TETHER_GRPC_TLS_CERT_FILE is not set: runtime gRPC would be plaintext",
        id="tls-cert-unset",
    ),
    pytest.param(
        "production",
        lambda kv, d: _set_env(
            _main(kv, d, kv.RUNTIME), "TETHER_GRPC_TLS_KEY_FILE", "/tmp/tls.key"
        ),
        "tether-runtime: TETHER_GRPC_TLS_KEY_FILE=/tmp/tls.key is not in a mounted Secret",
        id="tls-key-unmounted",
    ),
    pytest.param(
        "production",
        lambda kv, d: _set_env(_main(kv, d, kv.RUNTIME), "TETHER_GRPC_REFLECTION", "true"),
        "tether-runtime: TETHER_GRPC_REFLECTION is on in production",
        id="tls-reflection",
    ),
    pytest.param(
        "production",
        lambda kv, d: _drop_env(_main(kv, d, kv.GATEWAY), "TETHER_RUNTIME_TLS_CA_FILE"),
        "tether-gateway: TETHER_RUNTIME_TLS_CA_FILE is not set: plaintext to the runtime",
        id="tls-ca-unset",
    ),
    pytest.param(
        "production",
        lambda kv, d: _set_env(
            _main(kv, d, kv.GATEWAY), "TETHER_RUNTIME_TLS_CA_FILE", "/tmp/ca.crt"
        ),
        "tether-gateway: TETHER_RUNTIME_TLS_CA_FILE=/tmp/ca.crt is not in a mounted volume",
        id="tls-ca-unmounted",
    ),
    pytest.param(
        "production",
        lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.GATEWAY))["volumes"].append(
            {"name": "stolen", "secret": {"secretName": "tether-runtime-tls"}}
        ),
        "tether-gateway: mounts the runtime's TLS Secret tether-runtime-tls (its key)",
        id="tls-key-in-gateway",
    ),
]

# Who may reach what: each expectation of tether_k8s.rules.reachability, broken by a policy edit.
REACHABILITY: list[Any] = [
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-ingress")["ingress"][0]["from"][0][
            "namespaceSelector"
        ]["matchLabels"].__setitem__("kubernetes.io/metadata.name", "nginx"),
        "the ingress controller cannot reach the gateway on 8080",
        id="nginx-to-gateway",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-ingress")["ingress"][0].pop("from"),
        "a pod of another namespace may reach the gateway's API port 8080",
        id="gateway-open",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-runtime-ingress")["ingress"][0]["from"][0][
            "podSelector"
        ]["matchLabels"].__setitem__("app.kubernetes.io/name", "tether-gw"),
        "nothing lets the gateway reach the runtime",
        id="gateway-to-runtime-ingress",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-runtime-ingress")["ingress"][0]["ports"].append(
            {"protocol": "TCP", "port": 50052}
        ),
        "the gateway may reach the runtime's plaintext health port 50052",
        id="health-port",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-runtime-ingress")["ingress"].pop(2),
        "the monitoring namespace cannot scrape the runtime's metrics port 9464",
        id="scrape-runtime",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-ingress")["ingress"][1].__setitem__(
            "from", [{"namespaceSelector": {}}]
        ),
        "a pod of another namespace may reach the gateway's metrics port 9464",
        id="metrics-open",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-egress")["egress"].pop(0),
        "the gateway cannot reach the runtime on 50051",
        id="gateway-to-runtime-egress",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-runtime-egress-stores")["egress"][0]["ports"].pop(0),
        "runtime cannot reach port 5432 (a private address)",
        id="runtime-to-postgres",
    ),
    pytest.param(
        lambda kv, d: d.remove(kv.one(d, "NetworkPolicy", "tether-migrate-egress-postgres")),
        "migrate job cannot reach port 5432 (a store pod)",
        id="migrate-to-postgres",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-egress")["egress"][1]["ports"].append(
            {"protocol": "TCP", "port": 5432}
        ),
        "the gateway may reach Postgres (port 5432 at a public address)",
        id="gateway-to-postgres",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-runtime-egress-stores")["egress"][0]["ports"].pop(1),
        "runtime cannot reach port 6379 (a store pod)",
        id="runtime-to-redis",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-egress")["egress"].pop(1),
        "gateway cannot reach port 6379 (a private address)",
        id="gateway-to-redis",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-migrate-egress-postgres")["egress"][0]["ports"].append(
            {"protocol": "TCP", "port": 6379}
        ),
        "the migrate job may reach Redis (port 6379), which it does not use",
        id="migrate-to-redis",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-egress-dns-otel")["egress"][0]["ports"].pop(0),
        "migrate job cannot resolve DNS",
        id="dns",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-egress-dns-otel")["egress"][1]["to"][0][
            "namespaceSelector"
        ]["matchLabels"].__setitem__("kubernetes.io/metadata.name", "observability"),
        "runtime cannot reach the OTLP collector in the monitoring namespace on 4317",
        id="otlp-collector",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-egress-dns-otel")["egress"][1].pop("to"),
        "gateway may send OTLP (4318) to a public address (only to the monitoring namespace)",
        id="otlp-anywhere",
    ),
    pytest.param(
        lambda kv, d: d.remove(kv.one(d, "NetworkPolicy", "tether-runtime-egress-model-api")),
        "the runtime cannot reach the model API / IdP on 443",
        id="runtime-to-internet",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-egress")["egress"][2]["ports"][0].__setitem__(
            "port", 8443
        ),
        "the gateway cannot reach the IdP on 443",
        id="gateway-to-idp",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-gateway-egress")["egress"][2].pop("ports"),
        "the gateway may reach the internet beyond 443",
        id="gateway-beyond-443",
    ),
    pytest.param(
        lambda kv, d: _policy(kv, d, "tether-migrate-egress-postgres")["egress"].append(
            {"ports": [{"protocol": "TCP", "port": 443}]}
        ),
        "the migrate job may reach the internet",
        id="migrate-to-internet",
    ),
]

# What the base and production must not carry (dev_setting_problems), on the production render.
DEV_SETTINGS: list[Any] = [
    pytest.param(
        lambda kv, d: _config(kv, d).__setitem__("TETHER_ENV", "dev"),
        ": TETHER_ENV='dev' (dev setting)",
        id="configmap-env",
    ),
    pytest.param(
        lambda kv, d: _config(kv, d).__setitem__("TETHER_DEV_LOGIN", "1"),
        ": sets TETHER_DEV_LOGIN (dev setting)",
        id="configmap-dev-only",
    ),
    pytest.param(
        lambda kv, d: _config(kv, d).__setitem__("REDIS_URL", "redis://cache:6379/0"),
        ": holds REDIS_URL, a secret, as plain configuration",
        id="configmap-secret",
    ),
    pytest.param(
        lambda kv, d: _set_env(_main(kv, d, kv.GATEWAY), "TETHER_CONFORMANCE_PLAN", "x"),
        f"{GW}: sets TETHER_CONFORMANCE_PLAN (dev setting)",
        id="container-dev-only",
    ),
    pytest.param(
        lambda kv, d: _set_env(_main(kv, d, kv.GATEWAY), "TETHER_OIDC_CLIENT_SECRET", "x" * 40),
        f"{GW}: TETHER_OIDC_CLIENT_SECRET is a secret literal",
        id="container-secret-literal",
    ),
]


def _broken(kv: ModuleType, rendered: dict[str, Docs], overlay: str, mutate: Mutation) -> list[str]:
    docs = copy.deepcopy(rendered[overlay])
    assert kv.check(docs, overlay) == []
    mutate(kv, docs)
    problems: list[str] = kv.check(docs, overlay)
    return problems


@pytest.mark.parametrize(("overlay", "mutate", "expected"), CASES)
def test_rule_catches_a_render_that_breaks_it(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str, mutate: Mutation, expected: str
) -> None:
    problems = _broken(kv, rendered, overlay, mutate)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize(("mutate", "expected"), REACHABILITY)
def test_reachability_catches_a_policy_that_breaks_it(
    kv: ModuleType, rendered: dict[str, Docs], mutate: Mutation, expected: str
) -> None:
    problems = _broken(kv, rendered, "production", mutate)
    assert f"NetworkPolicy: {expected}" in "\n".join(problems), problems


@pytest.mark.parametrize(("mutate", "expected"), DEV_SETTINGS)
def test_production_carries_no_dev_setting(
    kv: ModuleType, rendered: dict[str, Docs], mutate: Mutation, expected: str
) -> None:
    docs = copy.deepcopy(rendered["production"])
    assert kv.dev_setting_problems(docs) == []
    mutate(kv, docs)
    problems = kv.dev_setting_problems(docs)
    assert any(expected in p for p in problems), problems
    # check() runs the same on a production overlay
    assert any(expected in p for p in kv.check(docs, "production"))


# --------------------------------------------------------------------------- the command


def test_cli_reports_each_finding_and_fails(
    kv: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An overlay that breaks a rule: its line says FAILED, each finding is listed below it,
    and the exit status is 1 (the base and the shipped overlays are not asked for)."""
    overlay = tmp_path / "too-small"
    overlay.mkdir()
    dev = os.path.relpath(
        REPO / "deploy" / "k8s" / "overlays" / "dev", overlay
    )  # kustomize: relative
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources: [{dev}]\n"
        "replicas: [{name: tether-runtime, count: 1}]\n"
    )
    assert kv.main([str(overlay)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "[base] 0 dev settings or secrets: ok"
    assert out[2].startswith("[too-small] 26 objects, 0 schema errors, ")
    assert out[2].endswith(" contract problems: FAILED")
    assert "  - tether-runtime: replicas 1 < 2" in out[3:]


def test_cli_fails_on_an_overlay_that_does_not_render(
    kv: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kv.main(["no-such-overlay"]) == 1
    out = capsys.readouterr().out
    assert "[no-such-overlay] RENDER FAILED\n" in out
    assert "[dev]" not in out
