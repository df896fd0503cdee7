"""Tether's checks of its Kubernetes manifests: mechanics (rendering with kustomize, schemas with
kubernetes-validate, label selectors, NetworkPolicy semantics, the report) and, in `rules`,
Tether's own operational contract. deploy/k8s/validate.py is the command."""
