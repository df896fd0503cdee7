"""The Ingress: tuned for SSE (no buffering, hour-long reads), routed to the gateway Service only,
with TLS in production, and routing the web UI and the API but never /metrics, /openapi.json or
the health endpoints."""

from __future__ import annotations

from tether_k8s.components import GATEWAY
from tether_k8s.manifests import Doc
from tether_k8s.rules import unmet

# What the Ingress must route (the web UI, its files, the API) and must not.
INGRESS_ROUTED = ("/", "/static/app.js", "/static/client/index.js", "/v1/runs", "/v1/session")
INGRESS_UNROUTED = ("/metrics", "/openapi.json", "/healthz", "/readyz", "/debug", "/metrics/x")
SSE_ANNOTATIONS = {
    "nginx.ingress.kubernetes.io/proxy-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-request-buffering": "off",
    "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
    "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
}


def _path_elements(path: str) -> list[str]:
    return [e for e in path.split("/") if e]


def ingress_routes(ingress: Doc, path: str) -> bool:
    """Whether the Ingress sends `path` to a backend (Kubernetes Exact / Prefix matching)."""
    for rule in ingress["spec"].get("rules", []):
        for p in (rule.get("http") or {}).get("paths", []):
            kind, want = p.get("pathType", "ImplementationSpecific"), p.get("path", "/")
            if kind == "Exact" and path == want:
                return True
            if kind == "Prefix":
                prefix = _path_elements(want)
                if _path_elements(path)[: len(prefix)] == prefix:
                    return True
            if kind == "ImplementationSpecific" and path.startswith(want):
                return True
    return bool(ingress["spec"].get("defaultBackend"))


def ingress_problems(ingress: Doc, overlay: str) -> list[str]:
    ann = ingress["metadata"].get("annotations") or {}
    problems = unmet(
        *(
            (ann.get(key) == value, f"Ingress/{GATEWAY}: {key} != {value!r}")
            for key, value in SSE_ANNOTATIONS.items()
        )
    )
    backends = [
        p["backend"]["service"]["name"]
        for r in ingress["spec"]["rules"]
        for p in r["http"]["paths"]
    ]
    problems += unmet(
        (
            backends and set(backends) == {GATEWAY},
            f"Ingress/{GATEWAY}: backend is not the gateway Service",
        )
    )
    if overlay == "production":
        problems += unmet((ingress["spec"].get("tls"), f"Ingress/{GATEWAY}: production needs TLS"))
    return problems + unmet(
        *(
            (ingress_routes(ingress, path), f"Ingress/{GATEWAY}: does not route {path}")
            for path in INGRESS_ROUTED
        ),
        *(
            (not ingress_routes(ingress, path), f"Ingress/{GATEWAY}: routes {path} to the public")
            for path in INGRESS_UNROUTED
        ),
    )
