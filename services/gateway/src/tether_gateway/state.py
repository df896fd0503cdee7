"""What the handlers of one gateway app share: settings, runtime client, Redis, metrics, streams."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from tether_common.auth import TokenVerifier
from tether_common.config import Settings
from tether_common.revocation import Revocations
from tether_common.run_bus import EventBus

from tether_gateway.auth import Authenticator
from tether_gateway.metrics import Metrics
from tether_gateway.ratelimit import RateLimiter
from tether_gateway.run_feed import FeedRegistry
from tether_gateway.script_batch import ScriptBatches
from tether_gateway.stream_deadlines import Deadlines
from tether_gateway.stream_grants import StreamGrants
from tether_gateway.stream_slots import StreamSlots
from tether_gateway.stream_tokens import StreamTokens

if TYPE_CHECKING:
    from tether_gateway.runtime_client import RuntimeClient


class OpenStream(Protocol):
    """An open SSE stream, as a drain sees it (tether_gateway.sse.EventStream)."""

    def stop(self) -> None: ...


@dataclass
class GatewayState:
    settings: Settings
    metrics: Metrics
    runtime: RuntimeClient | None = None
    # redis.asyncio clients, untyped to keep redis' generics out of every signature. `redis` has
    # no socket timeout of redis-py's (a timer per command written, with a task, and one per
    # answer read): each of its uses bounds a round trip as a whole (script_batch.py, the slots'
    # refresh, the readiness ping). The revocations' channel and writes rely on redis-py's bound,
    # so they have a client of their own that keeps it.
    redis: Any = None
    revocations_redis: Any = None
    # The runs this process starts with a streaming POST are followed here (bus_feed.py); None
    # without Redis or with TETHER_FEED_ON_BUS=false.
    bus: EventBus | None = None
    streams: set[OpenStream] = field(default_factory=set)
    draining: bool = False
    limiter: RateLimiter = field(init=False)
    feeds: FeedRegistry = field(init=False)
    slots: StreamSlots = field(init=False)
    auth: Authenticator = field(init=False)
    grants: StreamGrants = field(init=False)
    deadlines: Deadlines = field(init=False)

    def __post_init__(self) -> None:
        # The user tokens' verifier is the runtimes' (OIDC issuer and/or dev issuer; it holds
        # the JWKS); stream tokens are the gateways' own.
        self.auth = Authenticator(
            TokenVerifier.from_settings(self.settings),
            StreamTokens.from_settings(self.settings),
            Revocations(),
        )
        self.grants = StreamGrants(self.settings.jwt_leeway_s)
        # A revocation any pod records ends this pod's open streams holding that token.
        self.auth.revocations.on_revoked(self.grants.revoked)
        # The rate limit's and the stream slots' calls share their round trips to Redis.
        scripts = ScriptBatches()
        self.limiter = RateLimiter.from_settings(self.settings, scripts)
        # A lease of three heartbeats, refreshed every heartbeat: one missed tick is no loss.
        self.slots = StreamSlots(
            self.settings.max_streams_per_user,
            lease_s=3 * self.settings.sse_heartbeat_s,
            batches=scripts,
        )
        # Every stream's heartbeat and write stall limit, on one timer.
        self.deadlines = Deadlines(self.settings.sse_heartbeat_s)
        self.feeds = FeedRegistry(
            self.client,
            on_upstream=self.metrics.sse_upstream.inc,
            on_bus=lambda outcome: self.metrics.bus_feeds.labels(outcome).inc(),
        )

    def client(self) -> RuntimeClient:
        if self.runtime is None:
            raise RuntimeError("the runtime channel is not open")
        return self.runtime

    def drain(self) -> int:
        """Stop being ready and end every open stream so its client reconnects to another pod."""
        self.draining = True
        streams = list(self.streams)
        for stream in streams:
            stream.stop()
        self.feeds.close_all()
        return len(streams)


STATE: web.AppKey[GatewayState] = web.AppKey("tether_state", GatewayState)


def state(request: web.Request) -> GatewayState:
    return request.app[STATE]
