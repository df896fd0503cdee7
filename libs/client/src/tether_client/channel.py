"""The channel to Tether's runtime, configured as the runtime expects its callers to be.

- **Load balancing**: a `host:port` with a DNS name becomes `dns:///host:port` with the
  `round_robin` policy, so every resolved runtime pod gets calls (a headless Kubernetes Service
  resolves to all of them). An IP address, or any target with a scheme (`dns:`, `ipv4:`,
  `unix:`, ...), is used as given: `ipv4:10.0.0.1:50051,10.0.0.2:50051` spreads calls over
  both addresses.
- **Keepalive**: an HTTP/2 ping every 3 s (only while a call is open) keeps NATs and idle event
  streams alive and notices a silent peer within 2 s more: a runtime partitioned from its
  gateway (no FIN, no RST) is left, and its calls and streams go to another, within 5 s. Before,
  30 s + 10 s: the gateway kept sending every other call into the partition for its whole
  length (tests/integration/chaos/test_chaos_links.py). The runtime accepts pings every 2 s
  (`grpc.http2.min_ping_interval_without_data_ms`); a runtime of an older release (10 s)
  answers the faster pings with GOAWAY too_many_pings, and gRPC then doubles the interval.
- **Message size**: up to 16 MiB received (a replayed event batch, a long run).
- **Deadlines**: every unary call gets one (`DEFAULT_DEADLINE_S` unless the caller passes
  `timeout=`); event streams get none, as they live as long as the run.
- **TLS**: with `TETHER_RUNTIME_TLS_CA_FILE` set (`tls_from_env`), the channel verifies the
  runtime's certificate against that CA bundle; `TETHER_RUNTIME_TLS_SERVER_NAME` names the
  certificate's host when it is not the target's (`grpc.ssl_target_name_override`).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

DEFAULT_DEADLINE_S = 10.0
KEEPALIVE_TIME_MS = 3_000
KEEPALIVE_TIMEOUT_MS = 2_000
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# Reconnecting to a runtime that went away: first after 0.1 s, growing to at most 1 s between
# tries. gRPC's defaults (1 s growing by 1.6x to 120 s) left a gateway refusing calls for
# seconds with a live runtime on its other address: one restarted on its old port was still
# waiting out its backoff when the other died (tests/integration/chaos/
# test_chaos_runtime_failover.py). A try against a closed port costs a refused connect. The
# connect timeout (grpc.min_reconnect_backoff_ms, 20 s) stays: a slow handshake is not a failure.
INITIAL_RECONNECT_BACKOFF_MS = 100
MAX_RECONNECT_BACKOFF_MS = 1_000

# healthCheckConfig: each pod's grpc.health.v1 status decides whether it gets calls, so a pod
# that announces NOT_SERVING (draining, or cut off from Postgres: tether_runtime.store_watch) is
# left out of the round robin while its connection stays up.
_SERVICE_CONFIG = json.dumps(
    {"loadBalancingConfig": [{"round_robin": {}}], "healthCheckConfig": {"serviceName": ""}}
)


def channel_target(target: str) -> str:
    """`host:port` with a DNS name becomes `dns:///host:port` so every resolved pod gets calls."""
    if "://" in target or target.startswith(("dns:", "unix:", "ipv4:", "ipv6:")):
        return target
    if target.startswith("["):  # [v6 address]:port
        host = target[1:].split("]", 1)[0]
    else:
        host = target.rsplit(":", 1)[0] if target.count(":") == 1 else target
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"dns:///{target}"
    return target


def channel_options() -> Sequence[tuple[str, Any]]:
    """round_robin, keepalive, message size, transparent retries and a short reconnect backoff,
    as the gateway uses them."""
    return (
        ("grpc.service_config", _SERVICE_CONFIG),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.enable_retries", 1),
        ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    )


def tls_credentials(ca_file: str) -> grpc.ChannelCredentials:
    """Credentials that trust only the CA bundle in `ca_file` (PEM)."""
    try:
        roots = Path(ca_file).read_bytes()
    except OSError as err:
        raise ValueError(
            f"cannot read the runtime's CA bundle {ca_file!r}: {err.strerror}"
        ) from None
    return grpc.ssl_channel_credentials(root_certificates=roots)


def tls_options(server_name: str) -> tuple[tuple[str, Any], ...]:
    """The name the runtime's certificate must carry, when not the target's host."""
    return (("grpc.ssl_target_name_override", server_name),) if server_name else ()


def tls_from_env(
    env: Mapping[str, str] | None = None,
) -> tuple[grpc.ChannelCredentials | None, tuple[tuple[str, Any], ...]]:
    """TLS from TETHER_RUNTIME_TLS_CA_FILE / TETHER_RUNTIME_TLS_SERVER_NAME: (None, ()) unset."""
    e = os.environ if env is None else env
    ca_file = e.get("TETHER_RUNTIME_TLS_CA_FILE", "")
    if not ca_file:
        return None, ()
    return tls_credentials(ca_file), tls_options(e.get("TETHER_RUNTIME_TLS_SERVER_NAME", ""))


def open_channel(
    target: str,
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """An asyncio channel to `target` (TLS when `credentials` are given); `options` replace
    the defaults of the same keys."""
    given = {key for key, _ in options}
    merged = [*(o for o in channel_options() if o[0] not in given), *options]
    if credentials is None:
        return grpc.aio.insecure_channel(channel_target(target), options=merged)
    return grpc.aio.secure_channel(channel_target(target), credentials, options=merged)
