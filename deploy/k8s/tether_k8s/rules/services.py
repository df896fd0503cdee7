"""How the components are reached: the runtime listens on the pod IP behind a headless Service
(each gateway balances per call over the runtime pods, reconnecting every 300 s), the gateway on
its HTTP port behind its own Service."""

from __future__ import annotations

from tether_k8s.components import (
    GATEWAY,
    GRPC_HEALTH_PORT,
    GRPC_PORT,
    HEADLESS,
    HTTP_PORT,
    NAMESPACE,
    RUNTIME,
)
from tether_k8s.manifests import Doc, effective_env, find, main_container, pod_labels
from tether_k8s.rules import unmet
from tether_k8s.selectors import selector_matches


def runtime_address_problems(docs: list[Doc], runtime: Doc) -> list[str]:
    env = effective_env(docs, main_container(runtime))
    return unmet(
        (
            env.get("TETHER_GRPC_HEALTH_ADDR") == f"0.0.0.0:{GRPC_HEALTH_PORT}",
            f"{RUNTIME}: TETHER_GRPC_HEALTH_ADDR must serve the probes' port {GRPC_HEALTH_PORT}",
        ),
        (
            env.get("TETHER_GRPC_ADDR", "").endswith(f":{GRPC_PORT}")
            and not env.get("TETHER_GRPC_ADDR", "").startswith("127."),
            f"{RUNTIME}: TETHER_GRPC_ADDR must listen on the pod IP",
        ),
        (
            env.get("TETHER_GRPC_MAX_CONNECTION_AGE_S") == "300",
            f"{RUNTIME}: max connection age != 300s",
        ),
    )


def gateway_address_problems(docs: list[Doc], gateway: Doc) -> list[str]:
    env = effective_env(docs, main_container(gateway))
    return unmet(
        (env.get("TETHER_HTTP_ADDR") == f"0.0.0.0:{HTTP_PORT}", f"{GATEWAY}: TETHER_HTTP_ADDR"),
        (
            env.get("TETHER_RUNTIME_TARGET")
            == f"dns:///{HEADLESS}.{NAMESPACE}.svc.cluster.local:{GRPC_PORT}",
            f"{GATEWAY}: TETHER_RUNTIME_TARGET must be dns:/// on the headless Service",
        ),
    )


def service_problems(docs: list[Doc], headless: Doc, runtime: Doc, gateway: Doc) -> list[str]:
    spec = headless["spec"]
    gsvc = find(docs, "Service", GATEWAY)
    return unmet(
        (spec.get("clusterIP") == "None", f"{HEADLESS}: not headless"),
        (
            selector_matches({"matchLabels": spec.get("selector")}, pod_labels(runtime))
            and spec.get("selector"),
            f"{HEADLESS}: selector misses runtime pods",
        ),
        ([p["port"] for p in spec["ports"]] == [GRPC_PORT], f"{HEADLESS}: port != {GRPC_PORT}"),
        (
            gsvc
            and selector_matches({"matchLabels": gsvc[0]["spec"]["selector"]}, pod_labels(gateway)),
            f"{GATEWAY}: Service missing or misses gateway pods",
        ),
    )
