"""The runtime's store watch (tether_runtime.store_watch) against the real Postgres behind the
test kit's fault proxy: while the link is silent (no bytes, no FIN, no RST, as in a partition)
the pod's health goes NOT_SERVING after the grace, and SERVING again once Postgres answers. And
it ends the pool's sessions stalled mid-command for a lease, which Postgres never ends."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import uuid

from grpc_health.v1 import health, health_pb2
from tether_runtime.store_watch import StoreWatch, grace_s
from tether_testkit.fault_proxy import FaultProxy
from tether_testkit.stalled_pg_session import StalledSession


async def _status(servicer: health.aio.HealthServicer) -> int:  # type: ignore[name-defined]
    resp = await servicer.Check(health_pb2.HealthCheckRequest(service=""), None)
    return int(resp.status)


async def _until(servicer, status: int, timeout: float = 30) -> float:  # type: ignore[no-untyped-def]
    t = time.monotonic()
    while await _status(servicer) != status:
        assert time.monotonic() - t < timeout, f"health never became {status}"
        await asyncio.sleep(0.05)
    return time.monotonic() - t


def test_the_grace_is_half_a_lease_and_at_least_a_second_and_a_half() -> None:
    assert grace_s(15.0) == 7.5
    assert grace_s(3.0) == 1.5
    assert grace_s(1.0) == 1.5


async def test_health_follows_whether_postgres_answers(database_url: str) -> None:
    url = urllib.parse.urlsplit(database_url)
    proxy = FaultProxy((url.hostname or "127.0.0.1", url.port or 5432)).start()
    netloc = (f"{url.username}@" if url.username else "") + proxy.addr
    dsn = urllib.parse.urlunsplit(url._replace(netloc=netloc))
    servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    watch = StoreWatch(dsn, servicer, ("",), lease_ttl_s=3.0)
    watch.start()
    try:
        await asyncio.sleep(1.0)  # it connected and probed: still serving
        assert await _status(servicer) == health_pb2.HealthCheckResponse.SERVING
        proxy.set(silent=True)
        took = await _until(servicer, health_pb2.HealthCheckResponse.NOT_SERVING)
        assert took >= watch.grace_s - 0.6  # not before the grace (less one probe's period)
        proxy.set(silent=False)
        await _until(servicer, health_pb2.HealthCheckResponse.SERVING)
    finally:
        await watch.stop()
        await asyncio.to_thread(proxy.stop)


async def test_a_session_of_the_pool_stalled_for_a_lease_is_ended(database_url: str) -> None:
    name = f"tether-test-{uuid.uuid4().hex[:8]}"  # the DSN names the pool's sessions
    dsn = database_url + ("&" if "?" in database_url else "?") + f"application_name={name}"
    servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    watch = StoreWatch(dsn, servicer, ("",), lease_ttl_s=1.5)
    assert (watch.stalled_after_s, watch.sweep_every_s) == (1.5, 0.5)
    stalled = StalledSession(database_url, name, lock=4343)
    bystander = StalledSession(database_url, f"{name}-other")
    t = time.monotonic()
    watch.start()
    try:
        assert await asyncio.to_thread(stalled.ended, 10.0)
        took = time.monotonic() - t
        assert 1.5 <= took < 4.0, took  # after a lease, within a sweep or two
        assert not await asyncio.to_thread(bystander.ended)
    finally:
        await watch.stop()
        stalled.close()
        bystander.close()
