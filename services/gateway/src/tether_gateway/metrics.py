"""Prometheus metrics of one gateway app, in its own registry so apps (and tests) never collide."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tether_gateway_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "tether_gateway_http_request_seconds",
            "Time to answer a JSON request (SSE streams excluded)",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.sse_open = Gauge("tether_gateway_sse_connections", "Open SSE connections", registry=r)
        self.sse_upstream = Gauge(
            "tether_gateway_sse_upstream_streams",
            "Run feeds behind SSE, each following its run on a StreamRunEvents call or, for a run"
            " this gateway started, on the Redis bus (one per shared run feed, plus dedicated"
            " ones)",
            registry=r,
        )
        self.bus_feeds = Counter(
            "tether_gateway_bus_feeds",
            "Runs started with a streaming POST and followed on the Redis bus, by how that ended:"
            " ended (the run's end came on the bus), gap, nudge or overflow (handed over to the"
            " runtime's stream), left (the feed closed first)",
            ["outcome"],
            registry=r,
        )
        self.sse_events = Counter(
            "tether_gateway_sse_events", "Events written to SSE clients", registry=r
        )
        self.sse_dropped = Counter(
            "tether_gateway_sse_dropped",
            "SSE connections dropped by the gateway",
            ["reason"],
            registry=r,
        )
        self.sse_reauthenticate = Counter(
            "tether_gateway_sse_reauthenticate",
            "SSE streams ended because the token that opened them expired or was revoked",
            ["reason"],
            registry=r,
        )
        self.sse_heartbeats = Counter(
            "tether_gateway_sse_heartbeats", "Keep-alive comments sent to idle streams", registry=r
        )
        self.sse_replays = Counter(
            "tether_gateway_sse_replays",
            "SSE connections that resumed from a Last-Event-ID / ?after= position",
            registry=r,
        )
        self.sse_first_event = Histogram(
            "tether_gateway_sse_first_event_seconds",
            "From the SSE request's arrival to its first event written",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def middleware(self) -> Middleware:
        @web.middleware
        async def measure(request: web.Request, handler: Handler) -> web.StreamResponse:
            started = time.perf_counter()
            resp = await handler(request)
            info = request.match_info.route.resource
            route = info.canonical if info is not None else "unmatched"
            self.requests.labels(request.method, route, str(resp.status)).inc()
            if resp.content_type != "text/event-stream":
                self.latency.labels(route).observe(time.perf_counter() - started)
            return resp

        return measure
