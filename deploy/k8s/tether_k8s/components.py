"""Tether's components on Kubernetes: the names, namespace, ports and labels the rules share."""

from __future__ import annotations

NAMESPACE = "tether"
RUNTIME = "tether-runtime"
GATEWAY = "tether-gateway"
MIGRATE = "tether-migrate"
HEADLESS = "tether-runtime-headless"
GRPC_PORT = 50051
GRPC_HEALTH_PORT = 50052  # plaintext grpc.health.v1 alone, for the kubelet's probes
METRICS_PORT = 9464
HTTP_PORT = 8080
# Internal services that call the runtime's gRPC API directly carry this pod label, in namespace
# tether or in a namespace a cluster admin labelled with RUNTIME_CLIENTS_NS_LABEL (README).
RUNTIME_CLIENT_LABEL = {"tether.dev/runtime-client": "true"}
RUNTIME_CLIENTS_NS_LABEL = {"tether.dev/runtime-clients": "allowed"}
