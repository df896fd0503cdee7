"""deploy/k8s renders with real kustomize, validates against pinned Kubernetes schemas, and keeps
Tether's operational contract (docs/DESIGN.md sections 8-9)."""

from __future__ import annotations

import copy
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

# The manifests are rendered by kustomize (a process): `make test` only, not test-fast.
pytestmark = pytest.mark.process

Docs = list[dict[str, Any]]
REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "production")


def test_every_overlay_is_tested(kv: ModuleType) -> None:
    assert sorted(p.name for p in kv.overlays()) == sorted(OVERLAYS)


def test_base_renders_too(kv: ModuleType) -> None:
    docs = kv.render(REPO / "deploy" / "k8s" / "base")
    assert kv.schema_errors(docs) == []
    # The base is what production runs: no dev setting, no Secret, no secret literal.
    assert kv.dev_setting_problems(docs) == []


def test_dev_settings_are_caught(kv: ModuleType, rendered: dict[str, Docs]) -> None:
    problems = "\n".join(kv.dev_setting_problems(rendered["dev"]))
    assert "TETHER_ENV='dev'" in problems
    assert "renders a Secret" in problems
    assert "carries a secret committed to Tether's repository" in problems


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_schema_valid_for_pinned_kubernetes(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str
) -> None:
    assert kv.schema_errors(rendered[overlay], kv.K8S_VERSION) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_operational_contract(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    assert kv.check(rendered[overlay], overlay) == []


def test_validate_cli_passes(kv: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert kv.main([]) == 0
    out = capsys.readouterr().out
    assert "[dev]" in out and "[production]" in out


# --------------------------------------------------------------------------- explicit properties


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicas_and_autoscaling(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    for name in (kv.RUNTIME, kv.GATEWAY):
        dep = kv.one(docs, "Deployment", name)
        assert dep["spec"]["replicas"] >= 2
        hpa = kv.one(docs, "HorizontalPodAutoscaler", name)
        assert hpa["apiVersion"] == "autoscaling/v2"
        assert hpa["spec"]["scaleTargetRef"]["name"] == name
        assert hpa["spec"]["minReplicas"] >= 2
        pdb = kv.one(docs, "PodDisruptionBudget", name)
        assert pdb["apiVersion"] == "policy/v1"
        assert kv.selector_matches(pdb["spec"]["selector"], kv.pod_labels(dep))
    if overlay == "production":
        assert kv.one(docs, "Deployment", kv.RUNTIME)["spec"]["replicas"] >= 3
        assert kv.one(docs, "Deployment", kv.GATEWAY)["spec"]["replicas"] >= 3
    else:
        assert kv.one(docs, "Deployment", kv.RUNTIME)["spec"]["replicas"] == 2
        assert kv.one(docs, "Deployment", kv.GATEWAY)["spec"]["replicas"] == 2


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    rt = kv.pod_spec(kv.one(docs, "Deployment", kv.RUNTIME))["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        # the plaintext health-only port: kubelet's gRPC probes speak no TLS
        assert rt[probe]["grpc"]["port"] == 50052
        assert "httpGet" not in rt[probe] and "exec" not in rt[probe]
    gw = kv.pod_spec(kv.one(docs, "Deployment", kv.GATEWAY))["containers"][0]
    assert gw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gw["readinessProbe"]["httpGet"]["port"] in ("http", 8080)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runtime_is_balanced_per_call(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str
) -> None:
    docs = rendered[overlay]
    svc = kv.one(docs, "Service", kv.HEADLESS)
    assert svc["spec"]["clusterIP"] == "None"
    runtime = kv.one(docs, "Deployment", kv.RUNTIME)
    assert kv.selector_matches({"matchLabels": svc["spec"]["selector"]}, kv.pod_labels(runtime))
    assert [p["port"] for p in svc["spec"]["ports"]] == [50051]
    gw = kv.pod_spec(kv.one(docs, "Deployment", kv.GATEWAY))["containers"][0]
    target = kv.effective_env(docs, gw)["TETHER_RUNTIME_TARGET"]
    assert target == "dns:///tether-runtime-headless.tether.svc.cluster.local:50051"
    rt = kv.pod_spec(runtime)["containers"][0]
    assert kv.effective_env(docs, rt)["TETHER_GRPC_MAX_CONNECTION_AGE_S"] == "300"
    # no ClusterIP Service in front of the runtime (it would pin HTTP/2 connections to one pod)
    for s in kv.find(docs, "Service"):
        if kv.selector_matches({"matchLabels": s["spec"]["selector"]}, kv.pod_labels(runtime)):
            assert s["spec"].get("clusterIP") == "None"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grace_period_outlasts_drain(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str
) -> None:
    docs = rendered[overlay]
    for name in (kv.RUNTIME, kv.GATEWAY):
        dep = kv.one(docs, "Deployment", name)
        c = kv.pod_spec(dep)["containers"][0]
        drain = float(kv.effective_env(docs, c)["TETHER_DRAIN_S"])
        sleep = kv.prestop_sleep_s(c)
        assert drain == 20 and sleep == 5
        assert kv.pod_spec(dep)["terminationGracePeriodSeconds"] > drain + sleep


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_locked_down(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str
) -> None:
    docs = rendered[overlay]
    seen = 0
    for w in kv.workloads(docs):
        pod_sc = kv.pod_spec(w)["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == 10001
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
        for c in kv.containers(w):
            seen += 1
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["runAsUser"] == 10001
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["seccompProfile"]["type"] == "RuntimeDefault"
            assert {"cpu", "memory"} <= set(c["resources"]["requests"])
            assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    assert seen == 4  # runtime (and its wait-for-schema init container), gateway, migrate


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tether_env_per_overlay(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    for w in kv.workloads(docs):
        for c in kv.containers(w):
            assert kv.effective_env(docs, c)["TETHER_ENV"] == (
                "production" if overlay == "production" else "dev"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_only_by_reference(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    held = {}
    for w in kv.workloads(docs):
        for c in kv.containers(w):
            env = {e["name"]: e for e in c["env"]}
            own = f"{w['metadata']['name']}-secrets"
            refs = {
                name: e["valueFrom"]["secretKeyRef"]
                for name, e in env.items()
                if "secretKeyRef" in e.get("valueFrom", {})
            }
            for name, ref in refs.items():
                assert ref["key"] == name and "value" not in env[name]
                assert ref["name"].startswith(own), (name, ref)  # its own Secret only
            held[w["metadata"]["name"]] = set(refs)
    extra = set() if overlay == "production" else {"TETHER_JWT_SECRET"}  # the dev issuer
    assert held["tether-runtime"] == {"DATABASE_URL", "REDIS_URL"} | extra
    assert held["tether-migrate"] == {"DATABASE_URL"}
    if overlay == "production":
        assert held["tether-gateway"] == {
            "REDIS_URL",
            "TETHER_STREAM_TOKEN_SECRET",
            "TETHER_OIDC_CLIENT_SECRET",
        }
    else:
        assert held["tether-gateway"] == {"REDIS_URL", "TETHER_JWT_SECRET"}
    for cm in kv.find(docs, "ConfigMap"):
        assert not {"DATABASE_URL", "REDIS_URL", "TETHER_JWT_SECRET"} & set(cm.get("data") or {})
    secrets = kv.find(docs, "Secret")
    if overlay == "production":
        assert secrets == []  # provided by the cluster, never committed
    else:
        names = sorted(s["metadata"]["name"].rsplit("-", 1)[0] for s in secrets)
        assert names == [
            "tether-gateway-secrets",
            "tether-migrate-secrets",
            "tether-runtime-secrets",
        ]
        [gateway_secret] = [
            s for s in secrets if s["metadata"]["name"].startswith("tether-gateway")
        ]
        assert "DATABASE_URL" not in gateway_secret["data"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ingress_is_tuned_for_sse(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    ing = kv.one(rendered[overlay], "Ingress", kv.GATEWAY)
    ann = ing["metadata"]["annotations"]
    assert ann["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert ann["nginx.ingress.kubernetes.io/proxy-request-buffering"] == "off"
    assert int(ann["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(ann["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    assert ing["spec"]["ingressClassName"] == "nginx"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies(kv: ModuleType, rendered: dict[str, Docs], overlay: str) -> None:
    docs = rendered[overlay]
    rt = kv.pod_labels(kv.one(docs, "Deployment", kv.RUNTIME))
    gw = kv.pod_labels(kv.one(docs, "Deployment", kv.GATEWAY))
    job = kv.pod_labels(kv.one(docs, "Job", kv.MIGRATE))
    deny = kv.one(docs, "NetworkPolicy", "tether-default-deny")
    assert deny["spec"]["podSelector"] == {} and set(deny["spec"]["policyTypes"]) == {
        "Ingress",
        "Egress",
    }

    rt_in = kv.one(docs, "NetworkPolicy", "tether-runtime-ingress")
    assert kv.selector_matches(rt_in["spec"]["podSelector"], rt)
    # Three rules: gateways on the API port; labelled internal callers (this namespace, or an
    # admitted one) on the API port; Prometheus (monitoring namespace) on the metrics port.
    rule, callers, scrape = rt_in["spec"]["ingress"]
    assert callers["ports"] == [{"protocol": "TCP", "port": 50051}]
    caller_pods = {"matchLabels": {"tether.dev/runtime-client": "true"}}
    assert callers["from"] == [
        {"podSelector": caller_pods},
        {
            "namespaceSelector": {"matchLabels": {"tether.dev/runtime-clients": "allowed"}},
            "podSelector": caller_pods,
        },
    ]
    assert scrape["ports"] == [{"protocol": "TCP", "port": 9464}]
    assert scrape["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    [peer] = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace, pods only
    assert kv.selector_matches(peer["podSelector"], gw)
    assert not kv.selector_matches(peer["podSelector"], rt)
    assert not kv.selector_matches(peer["podSelector"], job)
    assert rule["ports"] == [{"protocol": "TCP", "port": 50051}]

    stores = kv.one(docs, "NetworkPolicy", "tether-runtime-egress-stores")
    assert kv.selector_matches(stores["spec"]["podSelector"], rt)
    for labels in (gw, job, {"app.kubernetes.io/name": "debug-shell"}):
        assert not kv.selector_matches(stores["spec"]["podSelector"], labels)
    assert {(p["protocol"], p["port"]) for r in stores["spec"]["egress"] for p in r["ports"]} == {
        ("TCP", 5432),
        ("TCP", 6379),
    }
    mig = kv.one(docs, "NetworkPolicy", "tether-migrate-egress-postgres")
    assert kv.selector_matches(mig["spec"]["podSelector"], job)
    assert [p for r in mig["spec"]["egress"] for p in r["ports"]] == [
        {"protocol": "TCP", "port": 5432}
    ]

    gw_in = kv.one(docs, "NetworkPolicy", "tether-gateway-ingress")
    assert kv.selector_matches(gw_in["spec"]["podSelector"], gw)
    ns = [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for r in gw_in["spec"]["ingress"]
        for p in r["from"]
    ]
    assert "ingress-nginx" in ns


# --------------------------------------------------------------------------- the checks have teeth


def _mutated(docs: Docs, kind: str, name: str) -> tuple[Docs, dict[str, Any]]:
    out = copy.deepcopy(docs)
    [target] = [d for d in out if d["kind"] == kind and d["metadata"]["name"] == name]
    return out, target


def test_schema_validation_rejects_typos(kv: ModuleType, rendered: dict[str, Docs]) -> None:
    docs, dep = _mutated(rendered["dev"], "Deployment", kv.RUNTIME)
    c = kv.pod_spec(dep)["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")
    errors = kv.schema_errors([dep])
    assert errors and "readinesProbe" in errors[0]


def test_schema_validation_rejects_wrong_types(kv: ModuleType, rendered: dict[str, Docs]) -> None:
    docs, dep = _mutated(rendered["dev"], "Deployment", kv.GATEWAY)
    dep["spec"]["replicas"] = "two"
    assert kv.schema_errors([dep])


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda kv, d: kv.one(d, "Deployment", kv.RUNTIME)["spec"].__setitem__("replicas", 1),
            "replicas 1 < 2",
        ),
        (
            lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.GATEWAY)).__setitem__(
                "terminationGracePeriodSeconds", 20
            ),
            "terminationGracePeriodSeconds 20",
        ),
        (
            lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.RUNTIME))["containers"][0][
                "securityContext"
            ].__setitem__("readOnlyRootFilesystem", False),
            "root filesystem is writable",
        ),
        (
            lambda kv, d: kv.pod_spec(kv.one(d, "Job", kv.MIGRATE))["containers"][0][
                "securityContext"
            ].pop("capabilities"),
            "capabilities not dropped",
        ),
        (lambda kv, d: kv.one(d, "Service", kv.HEADLESS)["spec"].pop("clusterIP"), "not headless"),
        (
            lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.RUNTIME))["containers"][0][
                "readinessProbe"
            ].__setitem__("grpc", {"port": 8080}),
            "readinessProbe is not a native grpc probe",
        ),
        (
            lambda kv, d: kv.one(d, "Ingress", kv.GATEWAY)["metadata"]["annotations"].pop(
                "nginx.ingress.kubernetes.io/proxy-buffering"
            ),
            "proxy-buffering",
        ),
        (
            lambda kv, d: d.remove(kv.one(d, "PodDisruptionBudget", kv.GATEWAY)),
            "PodDisruptionBudget",
        ),
        (lambda kv, d: d.remove(kv.one(d, "HorizontalPodAutoscaler", kv.RUNTIME)), "HPA"),
        (
            lambda kv, d: d.remove(kv.one(d, "NetworkPolicy", "tether-default-deny")),
            "no default deny",
        ),
        (
            lambda kv, d: kv.one(d, "NetworkPolicy", "tether-runtime-ingress")["spec"]["ingress"][
                0
            ]["from"][0].__setitem__("podSelector", {}),
            "admits pods other than the gateway",
        ),
        (
            lambda kv, d: kv.one(d, "NetworkPolicy", "tether-runtime-egress-stores")[
                "spec"
            ].__setitem__("podSelector", {}),
            "pods other than Tether's may reach port 5432",
        ),
        (
            lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.GATEWAY))["containers"][0][
                "env"
            ].append({"name": "TETHER_ENV", "value": "production"}),
            "TETHER_ENV='production'",
        ),
        (
            lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.RUNTIME))["containers"][0][
                "env"
            ].__setitem__(-1, {"name": "TETHER_JWT_SECRET", "value": "x" * 40}),
            "TETHER_JWT_SECRET is a literal value",
        ),
    ],
)
def test_contract_check_catches_regressions(
    kv: ModuleType, rendered: dict[str, Docs], mutate: Any, expected: str
) -> None:
    docs = copy.deepcopy(rendered["dev"])
    mutate(kv, docs)
    problems = kv.check(docs, "dev")
    assert any(expected in p for p in problems), problems


def test_production_overlay_flags_dev_mode(kv: ModuleType, rendered: dict[str, Docs]) -> None:
    # the dev render, judged as production, fails: wrong TETHER_ENV, a committed Secret, no TLS
    problems = kv.check(copy.deepcopy(rendered["dev"]), "production")
    assert any("TETHER_ENV='dev'" in p for p in problems)
    assert any("must not render a Secret" in p for p in problems)
    assert any("TLS" in p for p in problems)


# --------------------------------------------------------------------------- settings really load


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_env_loads_into_settings(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str
) -> None:
    """The env a pod would get parses with the real Settings loader, and in production passes the
    production guard once the cluster's Secret supplies real values."""
    from tether_common.config import Settings

    # What the cluster's Secrets supply, per component (deploy/k8s/README.md).
    cluster_secrets = {
        kv.RUNTIME: {
            "DATABASE_URL": "postgresql://tether:pw@db.internal.example:5432/tether",
            "REDIS_URL": "rediss://cache.internal.example:6379/0",
        },
        kv.GATEWAY: {
            "REDIS_URL": "rediss://cache.internal.example:6379/0",
            "TETHER_STREAM_TOKEN_SECRET": "s" * 48,
            "TETHER_OIDC_CLIENT_SECRET": "c" * 48,
        },
    }
    if overlay != "production":  # the dev issuer's key, from the dev overlay's Secrets
        for values in cluster_secrets.values():
            values["TETHER_JWT_SECRET"] = "k" * 48
    docs = rendered[overlay]
    for name in (kv.RUNTIME, kv.GATEWAY):
        c = kv.pod_spec(kv.one(docs, "Deployment", name))["containers"][0]
        env = {**kv.effective_env(docs, c), **cluster_secrets[name]}
        settings = Settings.from_env(env)
        assert settings.env == ("production" if overlay == "production" else "dev")
        assert settings.drain_s == 20.0
        assert settings.tool_gate_mode == "enforce"
        # The production guard's reasons (none expected; a gateway is asked no DATABASE_URL).
        # Production pods hold no HS256 key: their tokens come from the IdP (TETHER_OIDC_*). The
        # dev overlay is a dev issuer's cluster: only its identity settings differ.
        problems = settings.unsafe_for_production("gateway" if name == kv.GATEWAY else "runtime")
        if overlay != "production":
            problems = [
                p for p in problems if not p.startswith(("TETHER_JWT_SECRET", "TETHER_OIDC"))
            ]
        assert problems == []
        assert settings.processes == (2 if overlay == "production" else 1)
        if name == kv.RUNTIME:
            assert settings.model == ("openai" if overlay == "production" else "agent")
            assert settings.openai_api_key_file == "/var/run/secrets/tether/model/api-key"
        if name == kv.GATEWAY:
            assert settings.http_addr == "0.0.0.0:8080"
            assert settings.runtime_target.startswith("dns:///")
        else:
            assert settings.grpc_addr == "0.0.0.0:50051"


# --------------------------------------------------------------------------- used at scale (#17)


def _runtime_main(kv: ModuleType, docs: Docs) -> dict[str, Any]:
    main: dict[str, Any] = kv.pod_spec(kv.one(docs, "Deployment", kv.RUNTIME))["containers"][0]
    return main


def _drop_env(container: dict[str, Any], name: str) -> None:
    container["env"] = [e for e in container["env"] if e["name"] != name]


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    _drop_env(container, name)
    container["env"].append({"name": name, "value": value})


def _config(kv: ModuleType, docs: Docs) -> dict[str, str]:
    [cm] = [
        c for c in kv.find(docs, "ConfigMap") if c["metadata"]["name"].startswith("tether-config")
    ]
    data: dict[str, str] = cm["data"]
    return data


def _runtime_ingress_rules(kv: ModuleType, docs: Docs) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = kv.one(docs, "NetworkPolicy", "tether-runtime-ingress")["spec"][
        "ingress"
    ]
    return rules


def _caller_rule(kv: ModuleType, docs: Docs) -> dict[str, Any]:
    [rule] = [
        r
        for r in _runtime_ingress_rules(kv, docs)
        if any("tether.dev/runtime-client" in str(p) for p in r["from"])
    ]
    return rule


SCALE_REGRESSIONS = [
    # Only gateway pods annotated: the runtime's queue depth would not be scraped.
    (
        "dev",
        lambda kv, d: kv.one(d, "Deployment", kv.RUNTIME)["spec"]["template"]["metadata"].pop(
            "annotations"
        ),
        "tether-runtime: serves metrics on :9464 but its pods are not annotated",
    ),
    (
        "production",
        lambda kv, d: kv.one(d, "Deployment", kv.RUNTIME)["spec"]["template"]["metadata"][
            "annotations"
        ].__setitem__("prometheus.io/port", "8080"),
        "not annotated prometheus.io/scrape=true, prometheus.io/port=9464",
    ),
    # The NetworkPolicy admitting only gateway pods: internal callers cut off.
    (
        "dev",
        lambda kv, d: _runtime_ingress_rules(kv, d).remove(_caller_rule(kv, d)),
        "internal callers (label tether.dev/runtime-client=true in a namespace labelled",
    ),
    (
        "dev",
        lambda kv, d: _runtime_ingress_rules(kv, d).remove(_caller_rule(kv, d)),
        "internal callers of namespace tether cannot reach the runtime",
    ),
    # ... or opened too wide: a whole admitted namespace, or the label from any namespace.
    (
        "production",
        lambda kv, d: _caller_rule(kv, d)["from"][1].pop("podSelector"),
        "admits pods other than the gateway (an unlabelled pod of an admitted namespace)",
    ),
    (
        "production",
        lambda kv, d: _caller_rule(kv, d)["from"][1].__setitem__("namespaceSelector", {}),
        "admits pods other than the gateway (a labelled internal caller of an unadmitted",
    ),
    (
        "dev",
        lambda kv, d: _caller_rule(kv, d)["ports"].append({"protocol": "TCP", "port": 50052}),
        "internal callers may reach the runtime beyond its gRPC port",
    ),
    # Nothing keeping runtime pods from serving before the schema exists.
    (
        "dev",
        lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.RUNTIME)).pop("initContainers"),
        "no init container waits for the schema",
    ),
    (
        "production",
        lambda kv, d: kv.pod_spec(kv.one(d, "Deployment", kv.RUNTIME))["initContainers"][0][
            "args"
        ].remove("--wait"),
        "no init container waits for the schema",
    ),
    # No model provider in the ConfigMap, no key wired.
    (
        "dev",
        lambda kv, d: _config(kv, d).pop("TETHER_MODEL"),
        "TETHER_MODEL is not set",
    ),
    (
        "production",
        lambda kv, d: _config(kv, d).pop("TETHER_MODEL"),
        "TETHER_MODEL is not set",
    ),
    (
        "production",
        lambda kv, d: _config(kv, d).__setitem__("TETHER_MODEL", "agent"),
        "production TETHER_MODEL='agent' is not a provider",
    ),
    (
        "production",
        lambda kv, d: _drop_env(_runtime_main(kv, d), "TETHER_OPENAI_API_KEY_FILE"),
        "TETHER_OPENAI_API_KEY_FILE is not set: no key",
    ),
    (
        "production",
        lambda kv, d: _set_env(_runtime_main(kv, d), "TETHER_OPENAI_API_KEY_FILE", "/tmp/api-key"),
        "is not in the mounted Secret tether-model-key",
    ),
    (
        "production",
        lambda kv, d: [
            v["secret"].__setitem__("optional", True)
            for v in kv.pod_spec(kv.one(d, "Deployment", kv.RUNTIME))["volumes"]
            if v["name"] == "model-key"
        ],
        "the Secret tether-model-key is optional in production",
    ),
    # Processes per pod and the CPU they are given.
    (
        "dev",
        lambda kv, d: _drop_env(_runtime_main(kv, d), "TETHER_PROCESSES"),
        "tether-runtime: TETHER_PROCESSES='': set the processes per pod",
    ),
    (
        "production",
        lambda kv, d: _set_env(
            kv.pod_spec(kv.one(d, "Deployment", kv.GATEWAY))["containers"][0],
            "TETHER_PROCESSES",
            "4",
        ),
        "tether-gateway: TETHER_PROCESSES=4 does not match limits.cpu 2",
    ),
    (
        "production",
        lambda kv, d: _runtime_main(kv, d)["resources"]["requests"].__setitem__("cpu", "1"),
        "tether-runtime: requests.cpu 1 != limits.cpu 2 in production",
    ),
]


@pytest.mark.parametrize(("overlay", "mutate", "expected"), SCALE_REGRESSIONS)
def test_scale_checks_catch_the_old_shape(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str, mutate: Any, expected: str
) -> None:
    docs = copy.deepcopy(rendered[overlay])
    assert kv.check(docs, overlay) == []
    mutate(kv, docs)
    problems = kv.check(docs, overlay)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runtime_pods_wait_for_the_schema_and_are_scraped(
    kv: ModuleType, rendered: dict[str, Docs], overlay: str
) -> None:
    docs = rendered[overlay]
    runtime = kv.one(docs, "Deployment", kv.RUNTIME)
    [init] = kv.pod_spec(runtime)["initContainers"]
    assert init["args"] == ["migrate", "--check", "--wait", "600"]
    assert [e["name"] for e in init["env"] if "valueFrom" in e] == ["DATABASE_URL"]
    for name in (kv.RUNTIME, kv.GATEWAY):
        ann = kv.one(docs, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "9464"


def test_readme_says_what_the_cluster_provides(kv: ModuleType, rendered: dict[str, Docs]) -> None:
    readme = kv.README.read_text()
    docs = rendered["production"]
    assert kv.provided_objects(docs) >= {"tether-gateway-tls", "tether-model-key"}
    assert kv.readme_problems(docs, readme) == []
    assert kv.readme_problems(rendered["dev"], readme) == []
    # The README as it was (no command for the Ingress certificate nor the model key, no label
    # for internal callers) fails; so does one that no longer names the host to replace.
    lines = readme.splitlines()
    old = "\n".join(
        line
        for line in lines
        if "create secret tls tether-gateway-tls" not in line
        and "create secret generic tether-model-key" not in line
        and "tether.dev/runtime-client" not in line
    )
    problems = "\n".join(kv.readme_problems(docs, old))
    assert "no `kubectl create` for tether-gateway-tls" in problems
    assert "no `kubectl create` for tether-model-key" in problems
    assert "tether.dev/runtime-client=true is not documented" in problems
    renamed = readme.replace("`tether.example.com`", "`the host`")
    assert any("tether.example.com is not named" in p for p in kv.readme_problems(docs, renamed))
