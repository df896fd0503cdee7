"""Findings 1, 6 and 8 (deployment): what a deployed pod exposes and may reach.

- The dev token route exists only when `tether dev` asks for it (TETHER_DEV_LOGIN=1), not on a
  gateway merely left in dev mode, and production refuses the switch.
- Production refuses a signing key committed to the repository (the dev overlay's, say).
- The gateway pod holds no database credentials, and the rendered production NetworkPolicies,
  evaluated with Kubernetes' semantics, give it no route to Postgres.
- Metrics and OTLP are reachable only with the monitoring namespace; the Ingress never routes
  /metrics or /openapi.json; the gateway serves /metrics on its own port when deployed.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tether_common.config import Settings
from tether_testkit.processes import Proc, free_port, start_gateway

REPO = Path(__file__).resolve().parents[3]
Docs = list[dict[str, Any]]


def _validator() -> ModuleType:
    path = REPO / "deploy" / "k8s" / "validate.py"
    spec = importlib.util.spec_from_file_location("tether_k8s_validate_sec", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kv() -> ModuleType:
    return _validator()


@pytest.fixture(scope="module")
def production(kv: ModuleType) -> Docs:
    docs: Docs = kv.render(REPO / "deploy" / "k8s" / "overlays" / "production")
    return docs


def _labels(kv: ModuleType, docs: Docs, kind: str, name: str) -> dict[str, str]:
    labels: dict[str, str] = kv.pod_labels(kv.one(docs, kind, name))
    return labels


# --------------------------------------------------------------------------- network policy

POSTGRES_PEERS = (
    ("a managed database in the VPC", {"ip": "10.20.0.5"}),
    ("a database at a public address", {"ip": "35.190.1.2"}),
    ("a Postgres pod in another namespace", {"namespace": "tether-deps"}),
    ("a Postgres pod in Tether's namespace", {"namespace": "tether"}),
)


@pytest.mark.parametrize(("what", "where"), POSTGRES_PEERS)
def test_gateway_pod_cannot_reach_postgres_in_rendered_policy(
    kv: ModuleType, production: Docs, what: str, where: dict[str, str]
) -> None:
    postgres = kv.Peer(what, labels={"app.kubernetes.io/name": "postgresql"}, **where)
    gateway = _labels(kv, production, "Deployment", kv.GATEWAY)
    runtime = _labels(kv, production, "Deployment", kv.RUNTIME)
    assert not kv.allowed(production, "Egress", gateway, postgres, 5432)
    # The same evaluation lets the runtime through (the policy is not simply closed)...
    if where.get("namespace") != "tether":
        assert kv.allowed(production, "Egress", runtime, postgres, 5432)
        assert kv.allowed(production, "Egress", gateway, postgres, 6379)  # Redis: yes
    # ...and the policy the base had before (stores open to all three pods) let the gateway in.
    before = copy.deepcopy(production)
    before.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "tether-egress-stores", "namespace": "tether"},
            "spec": {
                "podSelector": {
                    "matchExpressions": [
                        {
                            "key": "app.kubernetes.io/name",
                            "operator": "In",
                            "values": ["tether-runtime", "tether-gateway", "tether-migrate"],
                        }
                    ]
                },
                "policyTypes": ["Egress"],
                "egress": [{"ports": [{"protocol": "TCP", "port": 5432}]}],
            },
        }
    )
    assert kv.allowed(before, "Egress", gateway, postgres, 5432)


def test_metrics_and_otlp_only_with_the_monitoring_namespace(
    kv: ModuleType, production: Docs
) -> None:
    gateway = _labels(kv, production, "Deployment", kv.GATEWAY)
    runtime = _labels(kv, production, "Deployment", kv.RUNTIME)
    job = _labels(kv, production, "Job", kv.MIGRATE)
    prometheus = kv.Peer("prometheus", "monitoring", {"app": "prometheus"})
    collector = kv.Peer("collector", "monitoring", {"app": "otel-collector"})
    for ns in ("default", "ingress-nginx", "team-a"):
        stranger = kv.Peer("stranger", ns, {"app": "prometheus"})
        for pod in (gateway, runtime):
            assert not kv.allowed(production, "Ingress", pod, stranger, 9464)
        for pod in (gateway, runtime, job):
            for port in (4317, 4318):
                sink = kv.Peer("sink", ns, {"app": "otel-collector"})
                assert not kv.allowed(production, "Egress", pod, sink, port)
    for pod in (gateway, runtime):
        assert kv.allowed(production, "Ingress", pod, prometheus, 9464)
    for pod in (gateway, runtime, job):
        assert kv.allowed(production, "Egress", pod, collector, 4317)
    # Prometheus scrapes the metrics port, not the gateway's API.
    assert not kv.allowed(production, "Ingress", gateway, prometheus, 8080)


def test_ingress_routes_the_ui_and_api_only(kv: ModuleType, production: Docs) -> None:
    ingress = kv.one(production, "Ingress", kv.GATEWAY)
    for path in ("/", "/static/app.js", "/v1/conversations", "/v1/runs/run_1/events"):
        assert kv.ingress_routes(ingress, path), path
    for path in ("/metrics", "/openapi.json", "/healthz", "/readyz", "/v1x", "/staticx"):
        assert not kv.ingress_routes(ingress, path), path


def test_the_contract_check_rejects_the_old_shapes(kv: ModuleType, production: Docs) -> None:
    """validate.py's check fails on each property the review found (so CI catches a revert)."""
    docs = copy.deepcopy(production)
    gateway = kv.pod_spec(kv.one(docs, "Deployment", kv.GATEWAY))["containers"][0]
    gateway["env"].append(
        {
            "name": "DATABASE_URL",
            "valueFrom": {
                "secretKeyRef": {"name": "tether-gateway-secrets", "key": "DATABASE_URL"}
            },
        }
    )
    kv.one(docs, "Ingress", kv.GATEWAY)["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = (
        "Prefix"
    )
    config = next(cm for cm in docs if cm["kind"] == "ConfigMap")
    config["data"]["TETHER_DEV_LOGIN"] = "1"
    runtime = kv.pod_spec(kv.one(docs, "Deployment", kv.RUNTIME))["containers"][0]
    runtime["env"] = [e for e in runtime["env"] if not e["name"].startswith("TETHER_GRPC_TLS_")]
    problems = "\n".join(kv.check(docs, "production"))
    assert "holds DATABASE_URL" in problems
    assert "routes /metrics to the public" in problems
    assert "TETHER_DEV_LOGIN" in problems
    assert "TETHER_GRPC_TLS_CERT_FILE is not set" in problems


# --------------------------------------------------------------------------- the guard


def _tether(verb: str, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cleared = ("DATABASE_URL", "REDIS_URL", "TETHER_JWT_SECRET", "TETHER_DEV_LOGIN")
    env = {k: v for k, v in os.environ.items() if k not in cleared} | extra
    return subprocess.run(
        [sys.executable, "-m", "tether_cli.main", verb],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


PRODUCTION = {
    "TETHER_ENV": "production",
    "DATABASE_URL": "postgresql://tether@db.internal:5432/tether",
    "REDIS_URL": "redis://cache.internal:6379/0",
}


def test_production_refuses_dev_login() -> None:
    result = _tether("gateway", {**PRODUCTION, "TETHER_DEV_LOGIN": "1"})
    assert result.returncode == 2, result
    assert "TETHER_DEV_LOGIN is set" in result.stderr and "any user name" in result.stderr


def test_production_refuses_the_dev_overlays_key() -> None:
    overlay = (REPO / "deploy/k8s/overlays/dev/kustomization.yaml").read_text()
    [key] = {
        line.split("=", 1)[1].strip()
        for line in overlay.splitlines()
        if line.strip().startswith("- TETHER_JWT_SECRET=")
    }
    assert len(key) >= 32  # long enough for every other check
    for verb in ("runtime", "gateway"):
        result = _tether(verb, {**PRODUCTION, "TETHER_JWT_SECRET": key})
        assert result.returncode == 2, result
        assert "TETHER_JWT_SECRET is a value committed to Tether's repository" in result.stderr
        assert key not in result.stderr  # the guard never repeats a secret


def test_a_gateway_is_asked_no_database_url() -> None:
    env = {"TETHER_ENV": "production", "REDIS_URL": "redis://cache.internal:6379/0"}
    settings = Settings.from_env(env)  # DATABASE_URL unset: it defaults to this machine
    assert not any("DATABASE_URL" in p for p in settings.unsafe_for_production("gateway"))
    assert any("DATABASE_URL" in p for p in settings.unsafe_for_production("runtime"))
    result = _tether("gateway", env)  # refused for other reasons (no signing key / IdP)
    assert result.returncode == 2, result
    assert "DATABASE_URL" not in result.stderr


# --------------------------------------------------------------------------- live gateways


def _post(url: str) -> int:
    req = urllib.request.Request(url, data=b'{"user": "mallory"}', method="POST")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_dev_mode_alone_serves_no_dev_token(gateway: Proc, base_env: dict[str, str]) -> None:
    assert base_env["TETHER_ENV"] == "dev" and "TETHER_DEV_LOGIN" not in base_env
    assert _post(f"{gateway.addr}/v1/dev/token") == 404


@pytest.fixture
def dev_login_gateway(runtime: Proc, base_env: dict[str, str]) -> Iterator[Proc]:
    proc = start_gateway({**base_env, "TETHER_DEV_LOGIN": "1"}, runtime.addr, name="gw-devlogin")
    yield proc
    proc.terminate()


def test_dev_login_serves_the_dev_token(dev_login_gateway: Proc) -> None:
    assert _post(f"{dev_login_gateway.addr}/v1/dev/token") == 201


def test_gateway_serves_metrics_on_its_own_port(runtime: Proc, base_env: dict[str, str]) -> None:
    port = free_port()
    env = {**base_env, "TETHER_METRICS_ADDR": f"127.0.0.1:{port}"}
    proc = start_gateway(env, runtime.addr, name="gw-metrics")
    try:
        assert _get(f"{proc.addr}/metrics") == 404  # not on the port the Ingress reaches
        assert _get(f"http://127.0.0.1:{port}/metrics") == 200
        assert _get(f"http://127.0.0.1:{port}/v1/agents") == 404  # and nothing else there
    finally:
        proc.terminate()
