"""Who may reach what: Tether's expectations of its NetworkPolicies, each a connection that must
be allowed or refused, evaluated on the rendered policies (tether_k8s.network_policies) for the
peers that matter. A default deny covers the namespace; the ingress controller reaches only the
gateway's HTTP port, the gateway and labelled internal callers only the runtime's gRPC port,
the monitoring namespace only the metrics ports; Postgres only from the runtime and the migrate
Job, Redis only from the runtime and the gateway; OTLP only to the monitoring namespace; the
internet only on 443, and never from the migrate Job."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from tether_k8s.components import (
    GRPC_HEALTH_PORT,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    NAMESPACE,
    RUNTIME_CLIENT_LABEL,
    RUNTIME_CLIENTS_NS_LABEL,
)
from tether_k8s.manifests import Doc, find, pod_labels
from tether_k8s.network_policies import Peer, allowed, pod

POSTGRES_PORT = 5432
REDIS_PORT = 6379
OTLP_PORTS = (4317, 4318)

OUTSIDER = {"app.kubernetes.io/name": "something-else", "app.kubernetes.io/part-of": "other"}
MONITORING = pod("Prometheus", "monitoring", {"app.kubernetes.io/name": "prometheus"})
COLLECTOR = pod("the OTLP collector", "monitoring", {"app": "otel-collector"})
ELSEWHERE = pod("a pod of another namespace", "default", {"app": "anything"})
NGINX = pod("ingress-nginx", "ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
OUTSIDER_POD = Peer("a non-Tether pod of the namespace", NAMESPACE, OUTSIDER)
DNS = pod("kube-dns", "kube-system", {"k8s-app": "kube-dns"})
PUBLIC = Peer("a public address", ip="34.120.10.20")
PRIVATE = Peer("a private address", ip="10.20.0.5")
IN_CLUSTER_STORE = pod("a store pod", "tether-deps", {"app.kubernetes.io/name": "postgresql"})
STORES = (PRIVATE, PUBLIC, IN_CLUSTER_STORE)
# Internal services call the runtime directly: labelled pods, here or in an admitted namespace.
UNADMITTED_CALLER = pod(
    "a labelled internal caller of an unadmitted namespace", "billing", RUNTIME_CLIENT_LABEL
)
ADMITTED_CALLER = Peer(
    "a labelled internal caller",
    "billing",
    RUNTIME_CLIENT_LABEL,
    ns_labels=RUNTIME_CLIENTS_NS_LABEL,
)
LOCAL_CALLER = Peer("a labelled internal caller of the namespace", NAMESPACE, RUNTIME_CLIENT_LABEL)
UNLABELLED_IN_ADMITTED = Peer(
    "an unlabelled pod of an admitted namespace",
    "billing",
    {"app": "x"},
    ns_labels=RUNTIME_CLIENTS_NS_LABEL,
)


def _kv(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


@dataclass(frozen=True)
class Connection:
    """`subject` (the labels of a pod of namespace tether) receiving from `peer` (direction
    "Ingress") or sending to it ("Egress"), on each of `ports`."""

    direction: str
    subject: Mapping[str, str]
    peer: Peer
    ports: tuple[int, ...]
    protocol: str = "TCP"


def inbound(subject: Mapping[str, str], peer: Peer, *ports: int) -> Connection:
    return Connection("Ingress", subject, peer, ports)


def outbound(
    subject: Mapping[str, str], peer: Peer, *ports: int, protocol: str = "TCP"
) -> Connection:
    return Connection("Egress", subject, peer, ports, protocol)


@dataclass(frozen=True)
class Expectation:
    """A connection the policies must allow on every port (`may`), or refuse on every port."""

    may: bool
    connection: Connection
    message: str

    def met(self, docs: list[Doc]) -> bool:
        c = self.connection
        return all(
            allowed(docs, c.direction, c.subject, c.peer, port, c.protocol) is self.may
            for port in c.ports
        )


def _may(connection: Connection, message: str) -> Expectation:
    return Expectation(True, connection, message)


def _may_not(connection: Connection, message: str) -> Expectation:
    return Expectation(False, connection, message)


def expectations(runtime: Doc, gateway: Doc, job: Doc) -> Iterator[Expectation]:
    rt, gw, mig = pod_labels(runtime), pod_labels(gateway), pod_labels(job)
    runtime_pod = Peer("the runtime", NAMESPACE, rt)
    gateway_pod = Peer("the gateway", NAMESPACE, gw)
    migrate_pod = Peer("the migrate job", NAMESPACE, mig)

    # ingress
    yield _may(
        inbound(gw, NGINX, HTTP_PORT), "the ingress controller cannot reach the gateway on 8080"
    )
    for src in (ELSEWHERE, MONITORING, OUTSIDER_POD, runtime_pod):
        yield _may_not(
            inbound(gw, src, HTTP_PORT),
            f"{src.what} may reach the gateway's API port {HTTP_PORT} (gateway ingress is open beyond its HTTP port)",
        )
    yield _may(inbound(rt, gateway_pod, GRPC_PORT), "nothing lets the gateway reach the runtime")
    for src in (OUTSIDER_POD, migrate_pod, MONITORING, ELSEWHERE, NGINX):
        yield _may_not(
            inbound(rt, src, GRPC_PORT),
            f"runtime ingress admits pods other than the gateway ({src.what}) on {GRPC_PORT}",
        )
    yield _may(
        inbound(rt, ADMITTED_CALLER, GRPC_PORT),
        f"internal callers (label {_kv(RUNTIME_CLIENT_LABEL)} in a namespace labelled "
        f"{_kv(RUNTIME_CLIENTS_NS_LABEL)}) cannot reach the runtime on {GRPC_PORT}",
    )
    yield _may(
        inbound(rt, LOCAL_CALLER, GRPC_PORT),
        f"internal callers of namespace {NAMESPACE} cannot reach the runtime on {GRPC_PORT}",
    )
    for src in (UNADMITTED_CALLER, UNLABELLED_IN_ADMITTED):
        yield _may_not(
            inbound(rt, src, GRPC_PORT),
            f"runtime ingress admits pods other than the gateway ({src.what}) on {GRPC_PORT}",
        )
    for src in (ADMITTED_CALLER, LOCAL_CALLER):
        yield _may_not(
            inbound(rt, src, GRPC_HEALTH_PORT, METRICS_PORT),
            f"internal callers may reach the runtime beyond its gRPC port {GRPC_PORT}",
        )
    for src in (OUTSIDER_POD, gateway_pod, ELSEWHERE):
        yield _may_not(
            inbound(rt, src, GRPC_HEALTH_PORT),
            f"{src.what} may reach the runtime's plaintext health port {GRPC_HEALTH_PORT} "
            "(only the kubelet, which policies do not govern, needs it)",
        )
    for labels, who in ((gw, "gateway"), (rt, "runtime")):
        yield _may(
            inbound(labels, MONITORING, METRICS_PORT),
            f"the monitoring namespace cannot scrape the {who}'s metrics port {METRICS_PORT}",
        )
        for src in (ELSEWHERE, NGINX, OUTSIDER_POD):
            yield _may_not(
                inbound(labels, src, METRICS_PORT),
                f"{src.what} may reach the {who}'s metrics port {METRICS_PORT} (only the monitoring namespace may)",
            )

    # egress: the gateway -> runtime; stores by component; DNS; OTLP only to monitoring
    yield _may(
        outbound(gw, runtime_pod, GRPC_PORT), "the gateway cannot reach the runtime on 50051"
    )
    for store in STORES:
        yield _may(
            outbound(rt, store, POSTGRES_PORT),
            f"runtime cannot reach port {POSTGRES_PORT} ({store.what})",
        )
        yield _may(
            outbound(mig, store, POSTGRES_PORT),
            f"migrate job cannot reach port {POSTGRES_PORT} ({store.what})",
        )
        yield _may_not(
            outbound(gw, store, POSTGRES_PORT),
            f"the gateway may reach Postgres (port {POSTGRES_PORT} at {store.what}): it holds no database credentials and needs no route",
        )
        yield _may(
            outbound(rt, store, REDIS_PORT),
            f"runtime cannot reach port {REDIS_PORT} ({store.what})",
        )
        yield _may(
            outbound(gw, store, REDIS_PORT),
            f"gateway cannot reach port {REDIS_PORT} ({store.what})",
        )
        yield _may_not(
            outbound(mig, store, REDIS_PORT),
            f"the migrate job may reach Redis (port {REDIS_PORT}), which it does not use",
        )
        for port in (POSTGRES_PORT, REDIS_PORT):
            yield _may_not(
                outbound(OUTSIDER, store, port), f"pods other than Tether's may reach port {port}"
            )
    for labels, who in ((rt, "runtime"), (gw, "gateway"), (mig, "migrate job")):
        yield _may(outbound(labels, DNS, 53, protocol="UDP"), f"{who} cannot resolve DNS")
        for port in OTLP_PORTS:
            yield _may(
                outbound(labels, COLLECTOR, port),
                f"{who} cannot reach the OTLP collector in the monitoring namespace on {port}",
            )
            for dest in (ELSEWHERE, PUBLIC, PRIVATE):
                yield _may_not(
                    outbound(labels, dest, port),
                    f"{who} may send OTLP ({port}) to {dest.what} (only to the monitoring namespace)",
                )
    yield _may(outbound(rt, PUBLIC, 443), "the runtime cannot reach the model API / IdP on 443")
    yield _may(outbound(gw, PUBLIC, 443), "the gateway cannot reach the IdP on 443")
    yield _may_not(outbound(gw, PUBLIC, 80), "the gateway may reach the internet beyond 443")
    yield _may_not(outbound(mig, PUBLIC, 443), "the migrate job may reach the internet")


def _default_deny(docs: list[Doc]) -> bool:
    return any(
        np["spec"]["podSelector"] == {}
        and set(np["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
        and not np["spec"].get("ingress")
        and not np["spec"].get("egress")
        for np in find(docs, "NetworkPolicy")
    )


def network_policy_problems(docs: list[Doc], runtime: Doc, gateway: Doc, job: Doc) -> list[str]:
    """Who may reach what, evaluated on the rendered policies for the peers that matter."""
    problems: list[str] = []
    if not _default_deny(docs):
        problems.append("NetworkPolicy: no default deny (ingress and egress) for the namespace")
    return problems + [
        f"NetworkPolicy: {e.message}"
        for e in expectations(runtime, gateway, job)
        if not e.met(docs)
    ]
