"""Production's runtime gRPC over TLS: the runtime serves it from a mounted Secret, without
reflection; the gateway verifies it with a mounted CA bundle and never sees the runtime's key."""

from __future__ import annotations

from tether_k8s.components import GATEWAY, RUNTIME
from tether_k8s.manifests import Doc, effective_env, main_container, mounted_from, pod_spec


def runtime_tls_problems(docs: list[Doc], runtime: Doc, gateway: Doc) -> list[str]:
    """Production: the runtime serves gRPC over TLS from a mounted Secret, without reflection;
    the gateway verifies it with a CA bundle and never sees the runtime's key."""
    problems: list[str] = []
    rt = main_container(runtime)
    env = effective_env(docs, rt)
    tls_secret = ""
    for key in ("TETHER_GRPC_TLS_CERT_FILE", "TETHER_GRPC_TLS_KEY_FILE"):
        path = env.get(key, "")
        volume = mounted_from(runtime, rt, path) if path else None
        if not path:
            problems.append(f"{RUNTIME}: {key} is not set: runtime gRPC would be plaintext")
        elif volume is None or "secret" not in volume:
            problems.append(f"{RUNTIME}: {key}={path} is not in a mounted Secret")
        else:
            tls_secret = volume["secret"]["secretName"]
    if env.get("TETHER_GRPC_REFLECTION", "0").lower() in ("1", "true", "yes", "on"):
        problems.append(f"{RUNTIME}: TETHER_GRPC_REFLECTION is on in production")
    gw = main_container(gateway)
    ca = effective_env(docs, gw).get("TETHER_RUNTIME_TLS_CA_FILE", "")
    volume = mounted_from(gateway, gw, ca) if ca else None
    if not ca:
        problems.append(
            f"{GATEWAY}: TETHER_RUNTIME_TLS_CA_FILE is not set: plaintext to the runtime"
        )
    elif volume is None or not ({"secret", "configMap"} & set(volume)):
        problems.append(f"{GATEWAY}: TETHER_RUNTIME_TLS_CA_FILE={ca} is not in a mounted volume")
    for vol in pod_spec(gateway).get("volumes", []):
        if tls_secret and (vol.get("secret") or {}).get("secretName") == tls_secret:
            problems.append(f"{GATEWAY}: mounts the runtime's TLS Secret {tls_secret} (its key)")
    return problems
