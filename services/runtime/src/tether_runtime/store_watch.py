"""Whether this pod reaches Postgres, announced through its gRPC health: a pod cut off from the
store stops announcing itself (NOT_SERVING), so gateways, whose channels balance only over
serving pods, send its calls to a pod that can answer them, and announces itself again once a
probe gets through. Its connection also ends the sessions of the runtime's own pool that stall
mid-command inside a transaction (store/stalled_sessions.py), which Postgres never ends itself.

Without it, a pod partitioned from Postgres but not from its clients kept taking calls that hung
until the gateway's deadline (5 s) for as long as the partition lasted (tests/integration/
chaos/test_chaos_partitions.py). Its leases expire meanwhile and another pod takes its runs
over; the probe's grace is half a lease, so the pod steps out of rotation before that."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg
from grpc_health.v1 import health, health_pb2
from tether_common import task_stop

from tether_runtime.store import stalled_sessions
from tether_runtime.store.db import STORE_ERRORS, connect

log = logging.getLogger(__name__)

PROBE_EVERY_S = 0.5
PROBE_TIMEOUT_S = 2.0
MIN_GRACE_S = 1.5


def grace_s(lease_ttl_s: float) -> float:
    """How long without a successful probe before the pod stops announcing itself."""
    return max(MIN_GRACE_S, lease_ttl_s / 2)


class StoreWatch:
    """Probes Postgres (`SELECT 1` on a connection of its own, so a busy pool is not taken for
    an unreachable store) and sets the health of `services` to follow it. Every third of a
    lease, a successful probe is followed by a sweep that ends the pool's sessions (the DSN's
    `session_name`) stalled mid-command for a lease: the same limit Postgres applies to one idle
    in a transaction (store/db.py)."""

    def __init__(
        self,
        dsn: str,
        servicer: health.aio.HealthServicer,  # type: ignore[name-defined]
        services: tuple[str, ...],
        lease_ttl_s: float,
    ) -> None:
        self.dsn = dsn
        self.servicer = servicer
        self.services = services
        self.grace_s = grace_s(lease_ttl_s)
        self.stalled_after_s = lease_ttl_s
        self.sweep_every_s = max(PROBE_EVERY_S, lease_ttl_s / 3)
        self.session_name = stalled_sessions.session_name(dsn)
        self.serving = True
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        await task_stop.stop(self._task)
        self._drop()

    async def _watch(self) -> None:
        last_ok = last_sweep = time.monotonic()
        while True:
            if await self._probe():
                last_ok = time.monotonic()
                await self._announce(True)
                if last_ok - last_sweep >= self.sweep_every_s:
                    last_sweep = last_ok
                    await self._sweep()
            elif time.monotonic() - last_ok > self.grace_s:
                await self._announce(False)
            await asyncio.sleep(PROBE_EVERY_S)

    async def _probe(self) -> bool:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                if self._conn is None or self._conn.is_closed():
                    self._conn = await connect(self.dsn)
                await self._conn.fetchval("SELECT 1")
            return True
        except STORE_ERRORS:  # TimeoutError, the probe that hung, is an OSError
            self._drop()  # a connection that hung is not trusted again: the next probe dials
            return False

    async def _sweep(self) -> None:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                assert self._conn is not None  # the probe before it connected
                await stalled_sessions.end_stalled(
                    self._conn, self.session_name, self.stalled_after_s
                )
        except STORE_ERRORS as e:  # the next sweep tries again; the probe judges the store
            log.warning("could not look for stalled Postgres sessions: %s", type(e).__name__)
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def _announce(self, serving: bool) -> None:
        if serving == self.serving:
            return
        self.serving = serving
        if serving:
            log.warning("Postgres reachable again: serving")
        else:
            log.warning(
                "Postgres unreachable for %.1fs: not serving until it answers", self.grace_s
            )
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self.services:
            await self.servicer.set(name, status)
