"""The bus's one subscriber connection lost without a word (issue #33, a runtime cut off from
Redis): a partition or a NAT that forgets the connection leaves it silent (no FIN, no RST), and a
reset ends it while Redis drops what was queued for it. Either way the streams of the process must
hear live batches again within seconds, and what was published meanwhile must reach them at once
(filled from Postgres), not at the next positioning check: here that check never comes
(quiet_check_s an hour), so only the bus can bring it.

Before the fix, the silent connection was kept for good (get_message only timed out), and a reset
one was re-dialled inside redis-py, unseen: live batches never came back in the first case, and in
both the batch published in between reached no stream."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from tether_common.auth import Principal
from tether_common.run_bus import EventBus
from tether_runtime.api.event_stream import EventStream
from tether_runtime.domain import events as ev
from tether_runtime.domain.events import RunEvent
from tether_runtime.store import event_log
from tether_testkit.fault_proxy import FaultProxy
from tether_testkit.running_runs import running_run

# The most a stream may wait, after the fault, for what was published during it: the bus's
# detection of a silent connection (redis_conn.SilenceWatch, SILENT_S: 3 s), a reconnect, and a round trip
# to Postgres, with slack for a loaded machine.
RECOVERY_S = 8.0


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultProxy]:
    url = urllib.parse.urlsplit(redis_url)
    proxy = FaultProxy((url.hostname or "127.0.0.1", url.port or 6379)).start()
    yield proxy
    proxy.stop()


async def _running_run(pool: Any) -> tuple[str, int]:
    async with pool.acquire() as conn:
        run = await running_run(conn, "silent")
    return run.id, run.lease_epoch


class Writer:
    """The run's lease holder on another runtime: commits events, then publishes them straight
    to Redis (not through the proxy)."""

    def __init__(self, pool: Any, publisher: EventBus, run_id: str, epoch: int) -> None:
        self.pool, self.publisher, self.run_id, self.epoch = pool, publisher, run_id, epoch
        self.last = 1

    async def write(self, *events: RunEvent) -> None:
        append = event_log.LeaseAppend(self.run_id, self.epoch, self.last, list(events), 0)
        async with self.pool.acquire() as conn:
            assert self.run_id in await event_log.append_as_lease_holders(conn, [append])
        self.last = append.new_last
        await self.publisher.publish(self.run_id, append.encoded)


async def _until(what: str, check: Any, timeout: float) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"{what}: not within {timeout:.1f}s") from None


@pytest.mark.parametrize("fault", ["half-open", "reset"])
async def test_streams_recover_from_a_subscriber_connection_lost_without_a_word(
    pool: Any, redis_url: str, proxy: FaultProxy, fault: str
) -> None:
    run_id, epoch = await _running_run(pool)
    bus = EventBus(f"redis://{proxy.addr}/0")
    publisher = EventBus(redis_url)
    writer = Writer(pool, publisher, run_id, epoch)
    stream = EventStream(pool, bus, quiet_check_s=3600)  # only the bus can fill a gap here
    got: list[int] = []
    await bus.start()
    try:
        await _until("the subscriber connects", lambda: bus.connected, 10)
        view = await stream.open(Principal("alice"), run_id, 0)

        async def follow() -> None:
            async for item in stream.follow(view, 0):
                data = item if isinstance(item, bytes) else ev.batch_from_encoded(item)  # type: ignore[arg-type]
                got.extend(e.sequence for e in ev.split_batch(data))

        following = asyncio.create_task(follow())
        await _until("the replay", lambda: got == [1], 10)
        await writer.write(ev.text_delta("m", "live"))
        await _until("a live batch", lambda: got == [1, 2], 5)

        # The connection goes dark; a batch is committed and published meanwhile.
        if fault == "half-open":
            assert await asyncio.to_thread(proxy.silence_open) == 1  # for good; new ones work
        else:
            proxy.set(silent=True)
        await writer.write(ev.text_delta("m", "in the dark"))
        if fault == "reset":
            # Redis drops the client, and what it held for it, as a NAT's reset would.
            assert await asyncio.to_thread(proxy.reset) == 1
            proxy.clear()

        # What was published in the dark reaches the stream without another publish.
        await _until("the batch published in the dark", lambda: got == [1, 2, 3], RECOVERY_S)
        # And live batches flow again: the terminal one ends the stream.
        await writer.write(ev.text_delta("m", "bye"), ev.done("m"))
        await asyncio.wait_for(following, 5)
        assert got == [1, 2, 3, 4, 5]
    finally:
        await bus.close()
        await publisher.close()
