"""How the runtime's gRPC server is reached: plaintext or TLS (TETHER_GRPC_TLS_CERT_FILE /
TETHER_GRPC_TLS_KEY_FILE), reflection or not (TETHER_GRPC_REFLECTION), and a plaintext port that
serves only grpc.health.v1 (TETHER_GRPC_HEALTH_ADDR) for kubelet's native gRPC probes, which
speak no TLS."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings

log = logging.getLogger(__name__)


def _read(name: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise UnsafeSettings(f"{name}={path!r} cannot be read: {err.strerror}") from None


def server_credentials(settings: Settings) -> grpc.ServerCredentials | None:
    """TLS credentials from the mounted certificate and key, or None (plaintext)."""
    if not settings.grpc_tls_cert_file:
        return None
    chain = _read("TETHER_GRPC_TLS_CERT_FILE", settings.grpc_tls_cert_file)
    key = _read("TETHER_GRPC_TLS_KEY_FILE", settings.grpc_tls_key_file)
    return grpc.ssl_server_credentials([(key, chain)])


def listen(
    server: grpc.aio.Server, settings: Settings, creds: grpc.ServerCredentials | None
) -> int:
    """Bind the API address, over TLS with `creds` (server_credentials); the bound port. A port
    in use (without TETHER_SHARED_PORT, which only a pod's children share) refuses the pod."""
    try:
        if creds is None:
            return server.add_insecure_port(settings.grpc_addr)
        log.info("runtime gRPC serves TLS", extra={"cert_file": settings.grpc_tls_cert_file})
        return server.add_secure_port(settings.grpc_addr, creds)
    except RuntimeError as err:  # grpc says only that it failed (its log line says why)
        raise UnsafeSettings(f"TETHER_GRPC_ADDR {settings.grpc_addr}: {err}") from None


def enable_reflection(
    server: grpc.aio.Server, settings: Settings, services: tuple[str, ...]
) -> None:
    """Reflection lets any caller list the API: on in dev, off in production unless asked."""
    if settings.grpc_reflection:
        reflection.enable_server_reflection((*services, reflection.SERVICE_NAME), server)


def health_only_server(
    settings: Settings,
    servicer: health.aio.HealthServicer,  # type: ignore[name-defined]
) -> grpc.aio.Server | None:
    """A second, plaintext server with the health service alone, for the kubelet's probes."""
    if not settings.grpc_health_addr:
        return None
    # Shared by a --processes N pod's children only (server_options).
    server = grpc.aio.server(options=[("grpc.so_reuseport", int(settings.shared_port))])
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    try:
        server.add_insecure_port(settings.grpc_health_addr)
    except RuntimeError as err:  # a port in use refuses the pod, as listen() does
        raise UnsafeSettings(
            f"TETHER_GRPC_HEALTH_ADDR {settings.grpc_health_addr}: {err}"
        ) from None
    return server
