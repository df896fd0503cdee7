"""RunFeed and FeedRegistry against scripted upstream calls: a resume point older than the
shared ring is served by the same kind of source, a dedicated RunFeed with an empty ring, which
hands its one subscriber over to the shared feed (with the ring's backlog) once it has caught up:
no gap, no duplicate, one upstream call per feed, none left behind."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from gw_fake_runtime import delta, done
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_gateway.run_feed import RING_FRAMES, FeedRegistry, RunFeed
from tether_gateway.runtime_client import (
    QUIET_REOPEN_S,
    RuntimeClient,
    ends_run,
    follow_events,
    open_channel,
)
from tether_testkit.loop_timers import count_timers

RUN = "run_1"
TOKEN: Any = "token"
CANCELLED = object()  # a Call's read after its cancel


class Call:
    """One scripted StreamRunEvents call: the test pushes its batches; one that ends the run is
    followed by the call's end (EOF), as the runtime does, unless `hang_at_end`. Cancelled
    before its end, its reads raise CancelledError, as a grpc.aio call's do."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.batches: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = False
        self.finished = False  # its end (EOF, its status) was received
        self.hang_at_end = False

    def push(self, events: list[events_pb2.RunEvent]) -> None:
        self.batches.put_nowait(SimpleNamespace(events=events))
        if events and events[-1].WhichOneof("event") == "done" and not self.hang_at_end:
            self.batches.put_nowait(grpc.aio.EOF)  # type: ignore[attr-defined]

    async def read(self) -> Any:
        if self.cancelled:
            raise asyncio.CancelledError
        batch = await self.batches.get()
        if batch is CANCELLED:
            raise asyncio.CancelledError
        if batch is grpc.aio.EOF:  # type: ignore[attr-defined]
            self.finished = True
        return batch

    async def code(self) -> grpc.StatusCode:
        while await self.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
            pass
        return grpc.StatusCode.OK

    def cancel(self) -> None:
        if not self.finished and not self.cancelled:
            self.cancelled = True
            self.batches.put_nowait(CANCELLED)


class Client:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.quiet_reopen_s = QUIET_REOPEN_S  # what RuntimeClient carries (follow_events)

    async def stream_events(self, request: Any, token: Any) -> Call:
        call = Call(request.after_sequence)
        self.calls.append(call)
        return call


class Recorder:
    """A subscriber (what sse.EventStream is to a feed) that keeps what it is offered."""

    def __init__(self) -> None:
        self.data = b""
        self.count = 0
        self.feeds: list[RunFeed] = []
        self.ended = False
        self.accept = True

    def offer(self, data: bytes, count: int) -> bool:
        if not self.accept:
            return False
        self.data += data
        self.count += count
        return True

    def source_ended(self, error: BaseException | None) -> None:
        self.ended = True

    def joined(self, feed: RunFeed) -> None:
        self.feeds.append(feed)

    def ids(self) -> list[int]:
        ids = [int(m) for m in re.findall(rb"^id: (\d+)$", self.data, re.M)]
        assert len(ids) == self.count
        return ids


# The run's log, each event built once: the same event read by two calls is the same bytes.
LOG = [delta(RUN, seq, f"d{seq}") for seq in range(1, 2001)]


def deltas(first: int, last: int) -> list[events_pb2.RunEvent]:
    return LOG[first - 1 : last]


async def until(cond: Callable[[], bool]) -> None:
    for _ in range(300):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


Rig = tuple[Client, list[int], FeedRegistry]


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    """A registry on scripted calls; `upstream` records the open-calls gauge's moves."""
    client, upstream = Client(), []
    runtime: Any = client
    feeds = FeedRegistry(lambda: runtime, linger_s=0.05, on_upstream=upstream.append)
    yield client, upstream, feeds
    feeds.close_all()
    await until(lambda: sum(upstream) == 0)  # no feed's task outlives its test


async def test_behind_the_ring_is_a_dedicated_feed_then_joins_the_shared_one(rig: Rig) -> None:
    client, upstream, feeds = rig
    first = Recorder()
    shared = feeds.subscribe(RUN, first, 0, TOKEN)
    assert shared.shared and feeds.feeds[RUN] is shared and first.feeds == [shared]
    await until(lambda: len(client.calls) == 1)
    client.calls[0].push(deltas(1, 1100))
    await until(lambda: shared.last == 1100)
    floor = 1100 - RING_FRAMES
    assert shared.floor == floor and not shared.covers(10)

    behind = Recorder()
    dedicated = feeds.subscribe(RUN, behind, 10, TOKEN)
    # The same source type: a RunFeed of its own, with no ring, this one subscriber, from 10.
    assert type(dedicated) is RunFeed and dedicated is not shared and not dedicated.shared
    assert (dedicated.ring_frames, dedicated.ring_bytes) == (0, 0)
    assert dedicated.subscribers == {behind: 10} and behind.feeds == [dedicated]
    assert feeds.feeds[RUN] is shared  # the registry's feed of the run is still the shared one
    await until(lambda: len(client.calls) == 2)
    own = client.calls[1]
    assert own.after == 10 and sum(upstream) == 2

    own.push(deltas(11, 50))  # still below the shared ring's floor: it keeps its own call
    await until(lambda: dedicated.last == 50)
    assert len(dedicated.ring) == 0 and dedicated.subscribers == {behind: 50}
    assert behind.feeds == [dedicated] and not own.cancelled
    shared_call = client.calls[0]
    shared_call.push(deltas(1101, 1110))  # the run goes on meanwhile
    await until(lambda: shared.last == 1110)
    assert behind.ids() == list(range(11, 51))

    own.push(deltas(51, 1050))  # caught up with the ring: handed over, with 1051..1110 from it
    await until(lambda: dedicated.closed)
    assert behind.feeds == [dedicated, shared] and shared.subscribers[behind] == 1110
    assert not dedicated.subscribers and not behind.ended
    await until(lambda: own.cancelled and sum(upstream) == 1)
    assert len(client.calls) == 2

    shared_call.push([*deltas(1111, 1119), done(RUN, 1120)])
    await until(lambda: first.ended and behind.ended)
    assert first.ids() == list(range(1, 1121))
    assert behind.ids() == list(range(11, 1121))  # every event after 10, in order, once
    assert first.data.endswith(behind.data)  # byte for byte what the shared feed sent
    await until(lambda: sum(upstream) == 0)
    assert shared.closed and RUN not in feeds.feeds


async def test_a_dedicated_feed_closes_when_its_subscriber_leaves_or_is_dropped(rig: Rig) -> None:
    client, upstream, feeds = rig
    feeds.subscribe(RUN, Recorder(), 500, TOKEN)
    await until(lambda: len(client.calls) == 1)
    client.calls[0].push(deltas(501, 1999))
    await until(lambda: feeds.feeds[RUN].last == 1999)

    gone, slow = Recorder(), Recorder()
    left = feeds.subscribe(RUN, gone, 600, TOKEN)
    dropped = feeds.subscribe(RUN, slow, 700, TOKEN)
    assert not left.shared and not dropped.shared and sum(upstream) == 3
    await until(lambda: len(client.calls) == 3)
    calls = {call.after: call for call in client.calls}
    left.leave(gone)  # the client went away: no linger, its upstream call ends now
    assert left.closed and not gone.ended
    slow.accept = False
    calls[700].push(deltas(701, 720))  # the connection refuses it (a slow reader)
    await until(lambda: dropped.closed)
    assert slow.ids() == [] and not dropped.subscribers
    await until(lambda: calls[600].cancelled and calls[700].cancelled)
    await until(lambda: sum(upstream) == 1)  # only the shared feed's call is left
    assert gone not in feeds.feeds[RUN].subscribers and slow not in feeds.feeds[RUN].subscribers


async def test_no_shared_feed_left_the_caught_up_one_opens_it_at_its_position(rig: Rig) -> None:
    client, upstream, feeds = rig
    first = Recorder()
    shared = feeds.subscribe(RUN, first, 1000, TOKEN)
    await until(lambda: len(client.calls) == 1)
    behind = Recorder()
    dedicated = feeds.subscribe(RUN, behind, 1, TOKEN)
    await until(lambda: len(client.calls) == 2)
    shared.leave(first)
    await until(lambda: shared.closed)  # everybody left it: closed after the linger
    assert RUN not in feeds.feeds
    client.calls[1].push(deltas(2, 30))
    await until(lambda: dedicated.closed)
    reopened = feeds.feeds[RUN]
    assert behind.feeds == [dedicated, reopened] and reopened.shared
    await until(lambda: len(client.calls) == 3)
    assert client.calls[2].after == 30
    client.calls[2].push([*deltas(29, 31), done(RUN, 32)])  # an overlap is delivered once
    await until(lambda: behind.ended)
    assert behind.ids() == list(range(2, 33))
    await until(lambda: sum(upstream) == 0)


async def test_a_dedicated_feed_whose_upstream_fails_ends_its_subscriber(rig: Rig) -> None:
    client, upstream, feeds = rig
    feeds.subscribe(RUN, Recorder(), 100, TOKEN)
    behind = Recorder()
    dedicated = feeds.subscribe(RUN, behind, 1, TOKEN)
    await until(lambda: len(client.calls) == 2)

    async def fail() -> Any:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.PERMISSION_DENIED, grpc.aio.Metadata(), grpc.aio.Metadata()
        )

    client.calls[1].read = fail  # type: ignore[method-assign]
    client.calls[1].push([])
    await until(lambda: behind.ended)
    assert dedicated.closed and RUN in feeds.feeds
    await until(lambda: sum(upstream) == 1)


async def test_a_call_that_ended_with_the_run_is_read_to_its_end_not_cancelled(rig: Rig) -> None:
    """After the terminal event the runtime ends the call: the feed reads its status instead of
    cancelling it (no RST_STREAM, no cancellation for the runtime to handle); a call that does
    not end soon after is cancelled."""
    client, upstream, feeds = rig
    sub = Recorder()
    feeds.subscribe(RUN, sub, 0, TOKEN)
    await until(lambda: len(client.calls) == 1)
    call = client.calls[0]
    call.push([*deltas(1, 3), done(RUN, 4)])
    await until(lambda: sub.ended and sum(upstream) == 0)
    assert call.finished and not call.cancelled
    assert sub.ids() == [1, 2, 3, 4]

    other = "run_2"
    hanging = Recorder()
    feeds.subscribe(other, hanging, 0, TOKEN)
    await until(lambda: len(client.calls) == 2)
    stuck = client.calls[1]
    stuck.hang_at_end = True
    stuck.push([done(other, 1)])
    await until(lambda: hanging.ended)  # delivered at once; the call's end is awaited after
    await until(lambda: stuck.cancelled and sum(upstream) == 0)


async def test_a_real_call_that_ended_with_the_run_ends_ok_not_cancelled(
    fake_runtime: tuple[Any, str], settings: Any, user_token: str
) -> None:
    """Over gRPC (the fake runtime's server ends StartRunAndStreamEvents after `done`): the call
    the feed followed ends with its status OK, never cancelled by the gateway."""
    channel = open_channel(settings)
    try:
        client = RuntimeClient(channel)
        request = rs.StartRunAndStreamEventsRequest(conversation_id="conv_1", text="hi")
        opened = await client.start_run_streaming(request, user_token)
        run_id = opened.first.run.id
        stream = follow_events(lambda: client, run_id, user_token, lambda: 0, opened)
        kinds = []
        async with contextlib.aclosing(stream):
            async for events in stream:
                kinds += [e.WhichOneof("event") for e in events]
                if ends_run(events):
                    break
        assert kinds[-1] == "done"
        assert not opened.call.cancelled()
        assert await opened.call.code() == grpc.StatusCode.OK
    finally:
        await channel.close()


async def test_a_silent_upstream_is_reopened_at_its_position(rig: Rig) -> None:
    """A call that stays silent (a runtime stream stalled) is cancelled after the quiet interval
    and the run is followed again from the feed's last sequence; the interval doubles while the
    new call stays silent too, and any batch brings it back."""
    client, _, feeds = rig
    client.quiet_reopen_s = 0.05
    sub = Recorder()
    feed = feeds.subscribe(RUN, sub, 0, TOKEN)
    await until(lambda: len(client.calls) == 1)
    client.calls[0].push(deltas(1, 5))
    await until(lambda: feed.last == 5)
    await until(lambda: len(client.calls) == 2)  # 0.05 s of silence
    assert client.calls[0].cancelled and client.calls[1].after == 5
    await until(lambda: len(client.calls) == 3)  # then 0.1 s
    client.calls[2].push([*deltas(6, 9), done(RUN, 10)])
    await until(lambda: feed.closed)
    assert sub.ids() == list(range(1, 11))


async def test_following_a_call_arms_one_timer_for_its_silence_not_one_per_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The quiet interval is one timer per call (a QuietClock): before, each read of each batch
    armed a timeout of its own and cancelled it."""
    client = Client()
    position = 0
    stream = follow_events(lambda: client, RUN, TOKEN, lambda: position)
    first = asyncio.ensure_future(anext(stream))
    await until(lambda: len(client.calls) == 1)
    for seq in range(1, 201):
        client.calls[0].push(deltas(seq, seq))
    position = (await first)[-1].sequence
    armed = count_timers(monkeypatch)
    while position < 200:
        position = (await anext(stream))[-1].sequence
    assert armed == []
    await stream.aclose()
    assert client.calls[0].cancelled and len(client.calls) == 1
