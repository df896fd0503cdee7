"""NetworkPolicy semantics: may this pod of namespace `tether` send to, or receive from, that peer
on that port? Evaluated on the rendered policies, offline.

Written here because no library does it where we can install one: the maintained evaluator is a
Go program (np-guard's netpol-analyzer), on neither PyPI nor npm; the Python ones are
network-config-analyzer (last release 2024-12, pins PyYAML==6.0.2 against our >=6.0.4, answers by
CLI report) and kube-netpol (one release, its own simulation model). Only what Tether's policies
use is implemented: pod/namespace selectors, ipBlock with except, ports with endPort. Named ports
are not (a rule naming one admits nothing here), and a policy without policyTypes counts as
Ingress only (Tether's policies all name theirs)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether_k8s.components import NAMESPACE
from tether_k8s.manifests import Doc, find
from tether_k8s.selectors import selector_matches


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
        """Its namespace's labels, with the name label the API server sets on every namespace
        (policies select the monitoring namespace by it: it cannot be forged by labelling
        another namespace)."""
        if not self.namespace:
            return {}
        return {**self.ns_labels, "kubernetes.io/metadata.name": self.namespace}


def pod(what: str, namespace: str, labels: Mapping[str, str]) -> Peer:
    return Peer(what, namespace, dict(labels))


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
