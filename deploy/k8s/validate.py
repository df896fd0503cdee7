#!/usr/bin/env python3
"""Render every kustomize overlay of deploy/k8s and check it without a cluster.

1. Render with a real kustomize: the standalone `kustomize` binary if present, else
   `kubectl kustomize` (kubectl embeds kustomize v5).
2. Validate every rendered object against the OpenAPI-derived JSON schemas of a pinned
   Kubernetes version (the `kubernetes-validate` package ships them; strict mode rejects unknown
   fields, which catches typos like `readinesProbe`).
3. Check Tether's operational contract: replicas, probes, headless runtime Service, drain timing,
   security context, secrets by reference, NetworkPolicies, HPA/PDB, SSE ingress annotations;
   and least privilege (issue #16): no dev setting in the base or production, each component
   holding only its own secrets (no database credentials in the gateway, no signing key in the
   runtime or the migrate Job), runtime gRPC over TLS in production, NetworkPolicies evaluated
   for who may reach what (no gateway -> Postgres; metrics and OTLP only from/to the monitoring
   namespace), and an Ingress that routes only the UI and the API (never /metrics).

Usage:  uv run python deploy/k8s/validate.py [--k8s-version 1.31] [--out DIR] [OVERLAY ...]
Exit status 0 when every overlay renders, validates and passes every check.
"""

# The work is done by the package tether_k8s beside this file (mechanics at its top, Tether's
# rules in tether_k8s.rules); this file is the command, and the names the tests use.
# ruff: noqa: E402 (tether_k8s is importable once this file's directory is on sys.path)

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if (_here := str(Path(__file__).resolve().parent)) not in sys.path:  # loaded by path, not run
    sys.path.append(_here)

from tether_k8s.components import GATEWAY, HEADLESS, MIGRATE, RUNTIME
from tether_k8s.contract import check
from tether_k8s.manifests import (
    containers,
    effective_env,
    find,
    one,
    pod_labels,
    pod_spec,
    workloads,
)
from tether_k8s.network_policies import Peer, allowed
from tether_k8s.rendering import (
    K8S_DIR,
    OVERLAYS_DIR,
    RenderError,
    load,
    overlays,
    render,
    render_text,
    renderer,
)
from tether_k8s.report import base_report, overlay_report, preamble, render_failure
from tether_k8s.rules.ingress import ingress_routes
from tether_k8s.rules.lifecycle import prestop_sleep_s
from tether_k8s.rules.readme import README, provided_objects, readme_problems
from tether_k8s.rules.settings import dev_setting_problems
from tether_k8s.schemas import K8S_VERSION, schema_errors
from tether_k8s.selectors import selector_matches

# What the tests use: tests/deploy and tests/integration/security/test_sec_deploy.py load this
# file by path.
__all__ = [
    "GATEWAY", "HEADLESS", "K8S_VERSION", "MIGRATE", "README", "RUNTIME", "Peer", "allowed",
    "check", "containers",
    "dev_setting_problems", "effective_env", "find", "ingress_routes", "main", "one", "overlays",
    "pod_labels", "pod_spec", "prestop_sleep_s", "provided_objects", "readme_problems", "render",
    "schema_errors", "selector_matches", "workloads",
]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("overlays", nargs="*", help="overlay names (default: all)")
    ap.add_argument("--k8s-version", default=os.environ.get("TETHER_K8S_VERSION", K8S_VERSION))
    ap.add_argument(
        "--out", type=Path, help="also write each rendered overlay to DIR/<overlay>.yaml"
    )
    args = ap.parse_args(argv)

    selected = [OVERLAYS_DIR / n for n in args.overlays] if args.overlays else overlays()
    print(*preamble(renderer(), args.k8s_version), sep="\n")
    # The base is what production runs: no dev setting, no secret (the overlays add their own).
    base_problems = dev_setting_problems(render(K8S_DIR / "base"))
    print(*base_report(base_problems), sep="\n")
    failed = bool(base_problems)
    for path in selected:
        name = path.name
        try:
            text = render_text(path)
        except RenderError as err:
            print(*render_failure(name, err), sep="\n")
            failed = True
            continue
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.yaml").write_text(text)
        docs = load(text)
        errors = schema_errors(docs, args.k8s_version)
        problems = check(docs, name) + readme_problems(docs, README.read_text())
        print(*overlay_report(name, len(docs), errors, problems), sep="\n")
        failed |= bool(errors or problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
