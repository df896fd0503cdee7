"""Tether's operational contract: every rule family run on an overlay's rendered objects, in the
order the report lists their findings."""

from __future__ import annotations

from tether_k8s.components import GATEWAY, HEADLESS, MIGRATE, RUNTIME
from tether_k8s.manifests import Doc, containers, one, workloads
from tether_k8s.rules import (
    credentials,
    ingress,
    lifecycle,
    metrics,
    migration,
    model_key,
    namespace,
    reachability,
    resources,
    runtime_tls,
    scaling,
    security,
    services,
    settings,
)


def check(docs: list[Doc], overlay: str) -> list[str]:
    """Every way these manifests break Tether's operational contract (empty list = fine)."""
    try:
        runtime = one(docs, "Deployment", RUNTIME)
        gateway = one(docs, "Deployment", GATEWAY)
        job = one(docs, "Job", MIGRATE)
        headless = one(docs, "Service", HEADLESS)
        public = one(docs, "Ingress", GATEWAY)
    except AssertionError as err:
        return [str(err)]

    problems = namespace.namespace_problems(docs)
    for dep in (runtime, gateway):
        problems += scaling.scaling_problems(docs, dep, overlay)
    for w in workloads(docs):
        problems += security.pod_problems(w)
        for c in containers(w):
            problems += security.context_problems(w, c)
            problems += resources.container_problems(w, c)
            problems += security.image_problems(w, c)
            problems += credentials.secret_problems(docs, w, c, overlay)
            problems += settings.container_problems(docs, w, c, overlay)
    if overlay == "production":
        problems += credentials.production_secret_problems(docs)
        problems += settings.dev_setting_problems(docs)
        problems += runtime_tls.runtime_tls_problems(docs, runtime, gateway)
    for dep in (runtime, gateway):
        problems += lifecycle.drain_problems(docs, dep)
    problems += lifecycle.runtime_probe_problems(runtime)
    problems += services.runtime_address_problems(docs, runtime)
    problems += lifecycle.gateway_probe_problems(gateway)
    problems += services.gateway_address_problems(docs, gateway)
    problems += services.service_problems(docs, headless, runtime, gateway)
    problems += ingress.ingress_problems(public, overlay)
    problems += migration.job_problems(job, runtime)
    problems += reachability.network_policy_problems(docs, runtime, gateway, job)
    problems += metrics.scrape_problems(docs)
    problems += migration.schema_wait_problems(runtime, job)
    problems += model_key.model_problems(docs, runtime, overlay)
    problems += resources.processes_problems(docs, overlay)
    return problems
