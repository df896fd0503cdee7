"""A stream that started its run itself (StartRunAndStreamEvents) is handed the run's first
event by the start (runs_api.StreamedStart) when its subscription was confirmed before the run
was stored: it sends that event at once, reads nothing back from Postgres, and follows the bus."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from tether_common.ids import new_id
from tether_common.run_bus import EventBus
from tether_runtime.api import event_stream
from tether_runtime.api.event_stream import EventStream
from tether_runtime.api.runs import StreamedStart
from tether_runtime.domain import events as ev
from tether_runtime.store import event_log


async def test_the_first_event_goes_out_from_memory_and_the_rest_from_the_bus(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_reads(conn: Any, **kw: Any) -> list[tuple[int, bytes]]:
        raise AssertionError("the stream read Postgres")

    monkeypatch.setattr(event_stream, "_page", no_reads)
    bus = EventBus(redis_url)
    await bus.start()
    try:
        async with asyncio.timeout(20):
            await _follow(bus)
    finally:
        await bus.close()


async def _follow(bus: EventBus) -> None:
    while not bus.connected:  # it connects in the background; until then nothing is confirmed
        await asyncio.sleep(0.02)
    stream = EventStream(pool=None, bus=bus, quiet_check_s=30)  # type: ignore[arg-type]
    run_id = new_id("run")
    ((_, _, _, first),) = event_log.stamp(run_id, 1, [ev.run_started("conv")])
    later = [r[3] for r in event_log.stamp(run_id, 2, [ev.text_delta("m", "hi "), ev.done("m")])]
    with stream.listen(run_id) as sub:
        streamed = StreamedStart(asyncio.ensure_future(bus.confirmed(sub)))
        assert await streamed.confirmed() and await streamed.confirmed()  # asked twice, once
        items = stream.follow_subscribed(sub, SimpleNamespace(id=run_id), 0, first=first)  # type: ignore[arg-type]
        assert await anext(items) == [first]
        await bus.publish(run_id, later)  # the worker's commit, after the run was stored
        rest = await asyncio.wait_for(anext(items), 10)
        assert ev.split_batch(rest) == [ev.RunEvent.FromString(d) for d in later]
        with pytest.raises(StopAsyncIteration):  # `done` ends it
            await asyncio.wait_for(anext(items), 10)


async def test_without_a_confirmed_subscription_the_start_hands_nothing_back() -> None:
    ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    ready.set_result(False)  # Redis unreachable: the stream reads Postgres as before
    streamed = StreamedStart(ready)
    assert not await streamed.confirmed() and streamed.first is None
