"""One runtime pod: the gRPC server (API, health, reflection in dev; TLS when configured:
transport.py) and the workers, with a graceful shutdown that flips health to NOT_SERVING first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from dataclasses import asdict

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from tether_common import event_loop, production_guard
from tether_common.auth import TokenVerifier
from tether_common.config import Settings
from tether_common.gc_tuning import freeze_startup_objects
from tether_common.grpc_poller import unblock_completion_poller
from tether_common.logging import setup_logging
from tether_common.sharded_run_bus import event_bus
from tether_common.tracing import setup_tracing

from tether_runtime.api.interceptor import RuntimeInterceptor
from tether_runtime.api.revoked_tokens import follow_revocations
from tether_runtime.api.servicer import RuntimeServicer, register
from tether_runtime.engine.agents import AgentRegistry
from tether_runtime.engine.loaded_agent import AgentLoadError
from tether_runtime.engine.process import Engine
from tether_runtime.engine.worker import Worker
from tether_runtime.policy.gate import ToolGate
from tether_runtime.store import idempotency, stalled_sessions
from tether_runtime.store.db import create_pool
from tether_runtime.store_watch import StoreWatch
from tether_runtime.transport import (
    enable_reflection,
    health_only_server,
    listen,
    server_credentials,
)
from tether_runtime.webhooks.delivery import DeliveryLoop
from tether_runtime.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)
SERVICE_NAME = "tether.runtime.v1.RuntimeService"


def server_options(settings: Settings) -> list[tuple[str, int]]:
    age_s = settings.grpc_max_connection_age_s
    return [
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        # Clients ping every 3 s while a call is open (tether_client.channel: a partitioned
        # peer is noticed within 5 s): accepted down to 2 s, faster is answered with GOAWAY.
        ("grpc.http2.min_ping_interval_without_data_ms", 2_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.max_connection_age_ms", int(age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", int(settings.drain_s * 1000)),
        # gRPC's default on Linux is on. Only a `--processes N` pod's children share a port
        # (tether_cli/pod.py: the kernel spreads new connections over them); a lone runtime
        # binding a port in use fails, rather than taking some of another server's calls.
        ("grpc.so_reuseport", int(settings.shared_port)),
    ]


async def run_server(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    production_guard.check(settings)
    tls = server_credentials(settings)  # an unreadable certificate stops the pod before it starts
    setup_logging("tether-runtime", settings.log_level)
    setup_tracing(settings.service_name or "tether-runtime")  # OTEL_SERVICE_NAME
    hooks = WebhookSettings.of(settings)
    log.info(
        "runtime starting", extra={"settings": settings.public_view(), "webhooks": asdict(hooks)}
    )
    verifier = TokenVerifier.from_settings(settings)
    server = grpc.aio.server(
        options=server_options(settings), interceptors=[RuntimeInterceptor(verifier)]
    )
    # The API address first: a port in use stops the pod before it opened a store or a task
    # (connections wait in the backlog until the server starts).
    port = listen(server, settings, tls)
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    probes = health_only_server(settings, health_servicer)  # its port too, before any store
    # Agents next: a misconfigured agent stops the pod before it touches a store.
    agents = AgentRegistry.load(settings)
    log.info(
        "agents loaded",
        extra={
            "agents": {n: a.source for n, a in agents.agents.items()},
            "default": agents.default,
        },
    )
    pool = await create_pool(
        settings.database_url,
        min_size=min(4, settings.db_pool_size),
        max_size=settings.db_pool_size,
        idle_tx_timeout_s=settings.lease_ttl_s,
        pooler=settings.db_pooler,
    )
    if settings.db_pooler == "transaction":
        log.info(
            "DATABASE_URL goes through a transaction pooler: no statement cache, and the "
            "idle-in-transaction limit is the pooler's (idle_transaction_timeout) or the role's"
        )
    drop_every = 0 if settings.env == "production" else settings.fault_drop_publish_every
    bus = event_bus(settings.redis_url, drop_every=drop_every)
    await bus.start()
    # The agents' own pools carry the runtime's session name: the store watch ends theirs too
    # when they stall mid-command (store/stalled_sessions.py).
    await agents.start(
        stalled_sessions.named(settings.database_url),
        transaction_pooler=settings.db_pooler != "none",
    )
    gate = ToolGate(settings.tool_gate_mode, settings.tool_deny, settings.tool_allow_grant)
    idempotency.configure(settings.idempotency_ttl_s)
    engine = Engine(pool, bus, settings, gate, agents)
    # Tokens signed out on any gateway pod are refused here too (no Redis: nothing to follow).
    following = contextlib.AsyncExitStack()
    await following.enter_async_context(follow_revocations(verifier, settings.redis_url))
    unblocked = unblock_completion_poller()  # grpc.aio's poller exists once a server does
    if settings.runtime_role != "worker":  # a worker-only process serves health, metrics only
        register(server, RuntimeServicer(engine))
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection(server, settings, (SERVICE_NAME, health.SERVICE_NAME))
    metrics_addr = settings.metrics_addr
    if metrics_addr:
        from prometheus_client import start_http_server

        host, _, mport = metrics_addr.rpartition(":")
        start_http_server(int(mport), addr=host or "0.0.0.0")
    worker = Worker(engine) if settings.runtime_role != "api" else None
    # Webhooks go out from the processes that execute runs (any number share the outbox).
    deliveries = (
        DeliveryLoop(pool, hooks) if settings.runtime_role != "api" and hooks.deliver else None
    )
    await server.start()
    if probes is not None:
        await probes.start()
    if worker is not None:
        await worker.start()
    if deliveries is not None:
        await deliveries.start()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    # Not serving while Postgres is out of reach (a partition): gateways go to other pods.
    store_watch = StoreWatch(
        settings.database_url, health_servicer, ("", SERVICE_NAME), settings.lease_ttl_s
    )
    store_watch.start()
    freeze_startup_objects()
    log.info(
        "runtime serving",
        extra={
            "addr": settings.grpc_addr,
            "port": port,
            "role": settings.runtime_role,
            "worker": worker.owner if worker else None,
            "grpc_poller_sockets_unblocked": unblocked,
            "event_loop": event_loop.name(),
        },
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("runtime draining")
    await store_watch.stop()
    await health_servicer.enter_graceful_shutdown()
    if deliveries is not None:
        await deliveries.stop()
    if worker is not None:
        await worker.stop(grace_s=min(5.0, settings.drain_s / 2))
    await server.stop(grace=settings.drain_s / 2)
    if probes is not None:
        await probes.stop(grace=None)
    await engine.close()
    await following.aclose()
    await verifier.aclose()
    await bus.close()
    await agents.close()
    await pool.close()
    log.info("runtime stopped")


def main() -> None:
    settings = Settings.from_env()
    try:
        event_loop.run(run_server(settings), uvloop=settings.uvloop)
    except AgentLoadError as err:
        print(f"tether runtime: {err}", file=sys.stderr)
        raise SystemExit(2) from None
