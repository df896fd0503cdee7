"""Metrics scraping: every Deployment that serves metrics is annotated to be scraped on that port
(the runtime's queue depth is what should drive its scaling)."""

from __future__ import annotations

from tether_k8s.manifests import Doc, effective_env, find, main_container


def scrape_problems(docs: list[Doc]) -> list[str]:
    """Every Deployment that serves metrics (TETHER_METRICS_ADDR) is annotated to be scraped on
    that port: the runtime's queue depth is what should drive its scaling."""
    problems: list[str] = []
    for dep in find(docs, "Deployment"):
        name = dep["metadata"]["name"]
        main = main_container(dep)
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
