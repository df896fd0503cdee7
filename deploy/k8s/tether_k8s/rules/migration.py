"""The schema: the migrate Job runs `tether migrate` with the runtime's image, and the runtime's
pods, applied with it, wait for the schema in an init container with the Job's image."""

from __future__ import annotations

from tether_k8s.components import MIGRATE, RUNTIME
from tether_k8s.manifests import Doc, main_container, pod_spec
from tether_k8s.rules import unmet


def job_problems(job: Doc, runtime: Doc) -> list[str]:
    mig = main_container(job)
    return unmet(
        (mig.get("args") == ["migrate"], f"Job/{MIGRATE}: does not run `tether migrate`"),
        (
            mig.get("image") == main_container(runtime).get("image"),
            f"Job/{MIGRATE}: image differs from the runtime's",
        ),
    )


def schema_wait_problems(runtime: Doc, job: Doc) -> list[str]:
    """The migrate Job and the Deployments are applied together: the runtime's pods (the ones
    using the database; a gateway is ready only once a runtime is) must wait for the schema in
    an init container running `tether migrate --check --wait`, with the Job's image."""
    inits = pod_spec(runtime).get("initContainers") or []
    job_image = main_container(job).get("image")
    for c in inits:
        args = c.get("args") or []
        if args[:2] == ["migrate", "--check"] and "--wait" in args:
            if c.get("image") != job_image:
                return [f"{RUNTIME}: init container {c['name']} runs another image than the Job"]
            return []
    return [
        f"{RUNTIME}: no init container waits for the schema (`tether migrate --check --wait`): "
        "pods started with the migrate Job would serve before the schema exists"
    ]
