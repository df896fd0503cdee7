"""The mechanics under Tether's rules (deploy/k8s/tether_k8s), on small hand-written objects: label
selectors, NetworkPolicy semantics, Ingress path matching, the preStop sleep. No render, no
process: `make test-fast` runs these."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType
from typing import Any

from tether_testkit.source_ast import parse_file

WEB = {"app": "web"}


def _policy(**spec: Any) -> dict[str, Any]:
    return {
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "tether"},
        "spec": {"podSelector": {"matchLabels": WEB}, **spec},
    }


def test_label_selectors(kv: ModuleType) -> None:
    labels = {"app": "web", "tier": "front"}

    def expr(op: str, *values: str) -> dict[str, Any]:
        return {"matchExpressions": [{"key": "tier", "operator": op, "values": list(values)}]}

    assert kv.selector_matches({}, labels)  # empty: everything
    assert not kv.selector_matches(None, labels)  # null: nothing
    assert kv.selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert not kv.selector_matches({"matchLabels": {"app": "web", "x": "y"}}, labels)
    assert kv.selector_matches(expr("In", "front", "back"), labels)
    assert not kv.selector_matches(expr("In", "back"), labels)
    assert kv.selector_matches(expr("NotIn", "back"), labels)
    assert not kv.selector_matches(expr("NotIn", "front"), labels)
    assert kv.selector_matches(expr("NotIn", "front"), {"app": "web"})  # absent key: not in
    assert kv.selector_matches(expr("Exists"), labels)
    assert not kv.selector_matches(expr("Exists"), {"app": "web"})
    assert kv.selector_matches(expr("DoesNotExist"), {"app": "web"})
    assert not kv.selector_matches(expr("DoesNotExist"), labels)


def test_a_pod_no_policy_selects_is_open(kv: ModuleType) -> None:
    stranger = kv.Peer("stranger", "default", {"app": "x"})
    assert kv.allowed([], "Ingress", WEB, stranger, 80)
    other = _policy(policyTypes=["Ingress"], podSelector={"matchLabels": {"app": "db"}})
    assert kv.allowed([other], "Ingress", WEB, stranger, 80)


def test_ports_protocols_and_policy_types(kv: ModuleType) -> None:
    client = kv.Peer("client", "tether", {"app": "client"})
    rule = {
        "from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
        "ports": [{"port": 8000, "endPort": 8100}, {"protocol": "UDP", "port": 53}],
    }
    docs = [_policy(ingress=[rule])]  # no policyTypes: Ingress only
    assert kv.allowed(docs, "Ingress", WEB, client, 8000)
    assert kv.allowed(docs, "Ingress", WEB, client, 8100)
    assert not kv.allowed(docs, "Ingress", WEB, client, 8101)
    assert not kv.allowed(docs, "Ingress", WEB, client, 8050, "UDP")
    assert kv.allowed(docs, "Ingress", WEB, client, 53, "UDP")
    assert kv.allowed(docs, "Egress", WEB, client, 1)  # egress is not governed by it
    named = [_policy(ingress=[{"ports": [{"port": "http"}]}])]
    assert not kv.allowed(named, "Ingress", WEB, client, 8080)  # named ports: not resolved
    any_port = [_policy(ingress=[{"ports": [{"protocol": "TCP"}]}])]
    assert kv.allowed(any_port, "Ingress", WEB, client, 1)


def test_peers_by_namespace_pod_and_address(kv: ModuleType) -> None:
    here = kv.Peer("client here", "tether", {"app": "client"})
    there = kv.Peer("client there", "other", {"app": "client"})
    admitted = kv.Peer(
        "client of a labelled namespace", "other", {"app": "client"}, ns_labels={"ok": "1"}
    )
    pods = {"podSelector": {"matchLabels": {"app": "client"}}}
    same_ns = [_policy(policyTypes=["Ingress"], ingress=[{"from": [pods]}])]
    assert kv.allowed(same_ns, "Ingress", WEB, here, 80)
    assert not kv.allowed(same_ns, "Ingress", WEB, there, 80)  # a podSelector alone: this namespace
    both = [
        _policy(
            policyTypes=["Ingress"],
            ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"ok": "1"}}, **pods}]}],
        )
    ]
    assert kv.allowed(both, "Ingress", WEB, admitted, 80)
    assert not kv.allowed(both, "Ingress", WEB, there, 80)
    assert not kv.allowed(
        both, "Ingress", WEB, kv.Peer("other pod", "other", {"app": "x"}, ns_labels={"ok": "1"}), 80
    )
    by_name = [
        _policy(
            policyTypes=["Ingress"],
            ingress=[
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "other"}
                            }
                        }
                    ]
                }
            ],
        )
    ]
    assert kv.allowed(by_name, "Ingress", WEB, there, 80)
    assert not kv.allowed(by_name, "Ingress", WEB, here, 80)
    block = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}
    out = [_policy(policyTypes=["Egress"], egress=[{"to": [block]}])]
    assert kv.allowed(out, "Egress", WEB, kv.Peer("public", ip="34.120.10.20"), 443)
    assert not kv.allowed(out, "Egress", WEB, kv.Peer("private", ip="10.1.2.3"), 443)
    assert not kv.allowed(out, "Egress", WEB, here, 443)  # a pod is not matched by an ipBlock here
    assert not kv.allowed(same_ns, "Ingress", WEB, kv.Peer("outside", ip="34.1.2.3"), 80)
    elsewhere = dict(_policy(policyTypes=["Ingress"]), metadata={"name": "q", "namespace": "x"})
    assert kv.allowed([elsewhere], "Ingress", WEB, there, 80)  # another namespace's policy


def test_ingress_path_matching(kv: ModuleType) -> None:
    def ingress(*paths: tuple[str, str], default: bool = False) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "rules": [{"http": {"paths": [{"pathType": t, "path": p} for t, p in paths]}}]
        }
        if default:
            spec["defaultBackend"] = {"service": {"name": "x"}}
        return {"spec": spec}

    prefix = ingress(("Prefix", "/v1/"), ("Exact", "/"))
    assert kv.ingress_routes(prefix, "/v1/runs") and kv.ingress_routes(prefix, "/v1")
    assert kv.ingress_routes(prefix, "/")
    assert not kv.ingress_routes(prefix, "/v10/runs")  # Prefix matches whole path elements
    assert not kv.ingress_routes(prefix, "/metrics")
    loose = ingress(("ImplementationSpecific", "/v1"))
    assert kv.ingress_routes(loose, "/v10/runs")  # nginx: a string prefix
    assert kv.ingress_routes(ingress(default=True), "/metrics")  # the default backend takes all


def test_prestop_sleep(kv: ModuleType) -> None:
    assert kv.prestop_sleep_s({"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}) == 5
    exec_sleep = {"lifecycle": {"preStop": {"exec": {"command": ["/bin/sleep", "3"]}}}}
    assert kv.prestop_sleep_s(exec_sleep) == 3
    shell = {"lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 3"]}}}}
    assert kv.prestop_sleep_s(shell) == 0  # only a plain sleep is understood
    assert kv.prestop_sleep_s({}) == 0


def test_layers_import_downward() -> None:
    """The mechanics know no rule; a rule never runs the contract (which runs every rule)."""
    package = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "tether_k8s"
    modules = sorted(package.rglob("*.py"))
    assert len(modules) > 20
    for path in modules:
        imported = set()
        for node in ast.walk(parse_file(path)):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        layers = {m.split(".")[1] for m in imported if m.startswith("tether_k8s.")}
        assert "contract" not in layers, path
        if path.parent.name != "rules" and path.name != "contract.py":
            assert "rules" not in layers, path
