"""One gateway pod: serve until SIGTERM/SIGINT, then drain (stop accepting, end SSE streams so
clients reconnect elsewhere, finish in-flight requests) and exit within the grace period."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time

from aiohttp import web
from tether_client.channel import tls_credentials
from tether_common import event_loop, production_guard
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings
from tether_common.gc_tuning import freeze_startup_objects
from tether_common.logging import setup_logging
from tether_common.tracing import setup_tracing

from tether_gateway import service_identity, stream_tokens
from tether_gateway.access_log import access_log_class
from tether_gateway.app import create_app
from tether_gateway.health import metrics_app
from tether_gateway.state import STATE

log = logging.getLogger(__name__)


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return (host.strip("[]") or "0.0.0.0"), int(port)  # noqa: S104 - ":8080" means all interfaces


def check_gateway(settings: Settings) -> None:
    """What only a production gateway needs: its own stream token key. (Without a service
    identity it starts, saying so: stream-token streams are then refused with 503.)"""
    if settings.env != "production":
        return
    problems = stream_tokens.production_problems(settings)
    if problems:
        raise UnsafeSettings(
            "refusing to start the gateway with TETHER_ENV=production, because:\n"
            + "".join(f"  - {p}\n" for p in problems)
        )


async def run_server(settings: Settings) -> None:
    production_guard.check(settings, "gateway")
    if settings.runtime_tls_ca_file:  # an unreadable CA bundle stops the pod before it serves
        try:
            tls_credentials(settings.runtime_tls_ca_file)
        except ValueError as err:
            raise UnsafeSettings(f"TETHER_RUNTIME_TLS_CA_FILE: {err}") from None
    check_gateway(settings)
    if settings.env == "production":
        for problem in service_identity.production_problems(settings):
            log.warning("%s", problem)
    setup_tracing(settings.service_name or "tether-gateway")  # OTEL_SERVICE_NAME
    host, port = split_addr(settings.http_addr)
    sock = bind_api(host, port, shared=settings.shared_port)
    app = create_app(settings)
    # Handlers still running when the grace period ends are cancelled by the runner.
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=max(0.5, settings.drain_s - 1.0),
        access_log_class=access_log_class(settings.access_log_sample),
    )
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=1024)
    await site.start()
    metrics_runner = await _serve_metrics(app, settings.metrics_addr)
    freeze_startup_objects()
    log.info("gateway listening on %s:%s", host, port, extra={"event_loop": event_loop.name()})

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    began = time.monotonic()
    ended = app[STATE].drain()
    log.info("gateway draining: ended %d streams", ended)
    try:
        await asyncio.wait_for(runner.cleanup(), timeout=settings.drain_s)
    except TimeoutError:
        log.warning("drain exceeded %.1fs; exiting anyway", settings.drain_s)
    if metrics_runner is not None:
        await metrics_runner.cleanup()
    log.info("gateway stopped after %.2fs of drain", time.monotonic() - began)


def bind_api(host: str, port: int, *, shared: bool) -> socket.socket:
    """The API's socket, bound before anything starts (not yet listening: a client is refused
    until the gateway serves). `shared` (TETHER_SHARED_PORT): SO_REUSEPORT, for a `--processes
    N` pod's children (tether_cli/pod.py), the kernel spreading new connections over them.
    Otherwise a port in use stops the gateway here, before it opened a channel or a task (a
    lone gateway once bound beside another with SO_REUSEPORT and took part of its connections)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise UnsafeSettings(f"TETHER_HTTP_ADDR {host}:{port}: {err.strerror}") from None
    sock.setblocking(False)
    return sock


async def _serve_metrics(app: web.Application, addr: str) -> web.AppRunner | None:
    """Prometheus /metrics on its own address (TETHER_METRICS_ADDR), if one is set."""
    if not addr:
        return None
    runner = web.AppRunner(metrics_app(app), handle_signals=False)
    await runner.setup()
    host, port = split_addr(addr)
    await web.TCPSite(runner, host, port).start()
    log.info("gateway metrics on %s:%s", host, port)
    return runner


def main() -> None:
    """Run one gateway, on uvloop unless TETHER_UVLOOP=off (the `tether gateway` entry point)."""
    settings = Settings.from_env()
    setup_logging("tether-gateway", settings.log_level)
    log.info("gateway starting", extra={"settings": settings.public_view()})
    event_loop.run(run_server(settings), uvloop=settings.uvloop)
