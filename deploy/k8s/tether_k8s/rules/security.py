"""Locked-down pods: no service account token, no service links, and every container non-root
as the image's user, read-only, without privileges or capabilities, under the runtime's seccomp
profile, from a pinned image."""

from __future__ import annotations

from tether_k8s.manifests import Doc, container_name, pod_spec
from tether_k8s.rules import unmet

APP_UID = 10001  # the images' user (Dockerfile)


def pod_problems(workload: Doc) -> list[str]:
    wname = f"{workload['kind']}/{workload['metadata']['name']}"
    spec = pod_spec(workload)
    return unmet(
        (spec.get("automountServiceAccountToken") is False, f"{wname}: mounts an SA token"),
        (
            spec.get("enableServiceLinks") is False,
            f"{wname}: service links would inject TETHER_* variables",
        ),
    )


def context_problems(workload: Doc, container: Doc) -> list[str]:
    """The container's securityContext, with the pod's where Kubernetes inherits it."""
    cname = container_name(workload, container)
    pod_sc = pod_spec(workload).get("securityContext") or {}
    sc = container.get("securityContext") or {}
    seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
    return unmet(
        (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, f"{cname}: runAsNonRoot"),
        (
            sc.get("runAsUser", pod_sc.get("runAsUser")) == APP_UID,
            f"{cname}: runAsUser != {APP_UID}",
        ),
        (sc.get("readOnlyRootFilesystem") is True, f"{cname}: root filesystem is writable"),
        (sc.get("allowPrivilegeEscalation") is False, f"{cname}: allowPrivilegeEscalation"),
        (sc.get("privileged") is not True, f"{cname}: privileged"),
        (
            (sc.get("capabilities") or {}).get("drop") == ["ALL"],
            f"{cname}: capabilities not dropped",
        ),
        (seccomp.get("type") == "RuntimeDefault", f"{cname}: seccompProfile is not RuntimeDefault"),
    )


def image_problems(workload: Doc, container: Doc) -> list[str]:
    image = container.get("image", "")
    return unmet(
        (
            ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"),
            f"{container_name(workload, container)}: image {image!r} has no pinned tag",
        )
    )
