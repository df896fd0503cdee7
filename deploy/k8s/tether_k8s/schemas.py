"""Validation of every rendered object against the OpenAPI-derived JSON schemas of a pinned
Kubernetes version, by the `kubernetes-validate` package (strict: unknown fields are errors,
which catches typos like `readinesProbe`)."""

from __future__ import annotations

from collections.abc import Iterable

import kubernetes_validate

from tether_k8s.manifests import Doc

K8S_VERSION = "1.31"  # the oldest Kubernetes minor these manifests must be valid for


def schema_errors(docs: Iterable[Doc], version: str = K8S_VERSION) -> list[str]:
    errors = []
    for doc in docs:
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = "/".join(str(p) for p in err.path)
            errors.append(f"{name}: {err.message} (at /{path}, Kubernetes {version})")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{name}: no schema for {doc.get('apiVersion')} in Kubernetes {version}")
    return errors
