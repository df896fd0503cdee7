"""Pod lifecycle: a Deployment's pods sleep in preStop, drain, and are given the grace to do both;
every probe is there, liveness never restarts a draining pod, and the kubelet probes each
component where it answers (the runtime natively over gRPC on its plaintext health port, the
gateway over HTTP on /healthz and /readyz)."""

from __future__ import annotations

from tether_k8s.components import GATEWAY, GRPC_HEALTH_PORT, RUNTIME
from tether_k8s.manifests import Doc, effective_env, main_container, pod_spec
from tether_k8s.rules import unmet

PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def prestop_sleep_s(container: Doc) -> float:
    pre = (container.get("lifecycle") or {}).get("preStop") or {}
    if "sleep" in pre:
        return float(pre["sleep"]["seconds"])
    cmd = (pre.get("exec") or {}).get("command") or []
    if len(cmd) == 2 and cmd[0] in ("sleep", "/bin/sleep"):
        return float(cmd[1])
    return 0.0


def drain_problems(docs: list[Doc], deployment: Doc) -> list[str]:
    name = deployment["metadata"]["name"]
    main = main_container(deployment)
    drain = float(effective_env(docs, main).get("TETHER_DRAIN_S", "20"))
    grace = pod_spec(deployment).get("terminationGracePeriodSeconds", 30)
    sleep = prestop_sleep_s(main)
    live = main.get("livenessProbe") or {}
    return unmet(
        (sleep > 0, f"{name}: no preStop sleep before SIGTERM"),
        (
            grace > drain + sleep,
            f"{name}: terminationGracePeriodSeconds {grace} <= "
            f"preStop {sleep} + TETHER_DRAIN_S {drain}",
        ),
        *((probe in main, f"{name}: no {probe}") for probe in PROBES),
        (
            live.get("periodSeconds", 10) * live.get("failureThreshold", 3) > grace,
            f"{name}: liveness could restart a draining pod before its grace period ends",
        ),
    )


def runtime_probe_problems(runtime: Doc) -> list[str]:
    rt = main_container(runtime)
    return unmet(
        *(
            (
                (rt.get(probe) or {}).get("grpc", {}).get("port") == GRPC_HEALTH_PORT,
                f"{RUNTIME}: {probe} is not a native grpc probe on the health port {GRPC_HEALTH_PORT}",
            )
            for probe in PROBES
        )
    )


def gateway_probe_problems(gateway: Doc) -> list[str]:
    gw = main_container(gateway)
    return unmet(
        (
            (gw.get("livenessProbe") or {}).get("httpGet", {}).get("path") == "/healthz",
            f"{GATEWAY}: liveness != /healthz",
        ),
        (
            (gw.get("readinessProbe") or {}).get("httpGet", {}).get("path") == "/readyz",
            f"{GATEWAY}: readiness != /readyz",
        ),
    )
