"""A run the gateway starts and follows on the Redis bus (bus_feed.py), against a real Redis: the
published batches follow the first event densely, each once; at a lost publish, a nudge (the
quiet check, a connection made again) or an overflow the run is handed over to the runtime's
stream from the last event delivered, and the subscription is gone; a start the bus cannot serve
starts nothing on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as rs
from tether_common.ids import new_id
from tether_common.run_bus import QUEUE_LIMIT, EventBus
from tether_gateway import bus_feed
from tether_gateway.bus_feed import Batches, Listening, follow_listened, start_on_bus, watch_quiet


def _delta(run_id: str, seq: int) -> bytes:
    event = events_pb2.RunEvent(
        run_id=run_id, sequence=seq, text_delta=events_pb2.TextDelta(message_id="m", delta="x")
    )
    return event.SerializeToString()


def _done(run_id: str, seq: int) -> bytes:
    return events_pb2.RunEvent(
        run_id=run_id, sequence=seq, done=events_pb2.Done(message_id="m")
    ).SerializeToString()


@pytest.fixture
async def bus(redis_url: str) -> AsyncIterator[EventBus]:
    bus = EventBus(redis_url)
    await bus.start()
    async with asyncio.timeout(10):
        while not bus.connected:
            await asyncio.sleep(0.02)
    yield bus
    await bus.close()


class Follower:
    """follow_listened as a feed drives it: the sequences it was given, where the runtime's
    stream was asked to start, and how the bus's part ended."""

    def __init__(self, listening: Listening, tail: Sequence[int] = ()) -> None:
        self.listening = listening
        self.got: list[int] = []
        self.rest_from: list[int] = []
        self.outcomes: list[str] = []
        self.tail = tail
        run_id = listening.sub.run_id
        self.stream = follow_listened(listening, self._rest, self.outcomes.append)
        self.run_id = run_id

    async def _rest(self) -> Batches:  # type: ignore[misc]
        after = self.got[-1]
        self.rest_from.append(after)
        for seq in self.tail:
            if seq > after:
                yield [events_pb2.RunEvent.FromString(_delta(self.run_id, seq))]

    async def read(self, n: int) -> None:
        """Read until `n` events were given."""
        async with asyncio.timeout(10):
            while len(self.got) < n:
                batch = await anext(self.stream)
                self.got.extend(e.sequence for e in batch)


async def _listening(bus: EventBus) -> Listening:
    listening = Listening(bus, new_id("run"))
    assert await listening.confirmed()
    listening.sub.position = 1  # run_started, delivered from StartRun's answer (start_on_bus)
    return listening


async def test_batches_follow_densely_each_once_to_the_end(bus: EventBus) -> None:
    f = Follower(await _listening(bus))
    run_id = f.run_id
    f.got.append(1)  # the first event, from StartRun's answer
    await bus.publish(run_id, [_delta(run_id, 2), _delta(run_id, 3)])
    await bus.publish(run_id, [_delta(run_id, 3), _delta(run_id, 4)])  # 3 again: a repeat
    await bus.publish(run_id, [_done(run_id, 5)])
    await f.read(5)
    assert f.got == [1, 2, 3, 4, 5]
    with pytest.raises(StopAsyncIteration):
        await anext(f.stream)
    assert f.outcomes == ["ended"] and f.rest_from == []
    assert bus.subscriptions() == [] and f.listening.closed


async def test_a_lost_publish_hands_the_run_to_the_runtime_from_the_last_event(
    bus: EventBus,
) -> None:
    f = Follower(await _listening(bus), tail=[4, 5, 6])
    run_id = f.run_id
    f.got.append(1)
    await bus.publish(run_id, [_delta(run_id, 2), _delta(run_id, 3)])
    await bus.publish(run_id, [_delta(run_id, 5), _delta(run_id, 6)])  # 4 was lost
    await f.read(6)
    assert f.got == [1, 2, 3, 4, 5, 6]  # 5 and 6 from the runtime, never twice
    assert f.rest_from == [3] and f.outcomes == ["gap"]
    assert bus.subscriptions() == []  # unsubscribed before the runtime's stream opened
    await f.stream.aclose()


async def test_a_quiet_run_stays_on_the_bus_until_the_positioning_check_finds_it_behind(
    bus: EventBus,
) -> None:
    f = Follower(await _listening(bus), tail=[3, 4])
    run_id = f.run_id
    f.got.append(1)
    stored = {run_id: 2}  # what GetRunPositions answers: the run's last stored sequence
    asked: list[list[str]] = []

    async def positions(ids: list[str]) -> dict[str, int]:
        asked.append(ids)
        return {i: stored[i] for i in ids if i in stored}

    watch = asyncio.create_task(watch_quiet(bus, 0.1, positions))
    try:
        await bus.publish(run_id, [_delta(run_id, 2)])
        await f.read(2)
        reading = asyncio.ensure_future(f.read(3))
        async with asyncio.timeout(10):
            while len(asked) < 3:  # quiet, checked, and not behind: it stays on the bus
                await asyncio.sleep(0.02)
        assert not reading.done() and f.rest_from == [] and f.outcomes == []
        stored[run_id] = 3  # 3 was stored and its publish lost (the run's last one, say)
        await reading
    finally:
        watch.cancel()
    assert all(ids == [run_id] for ids in asked)
    assert f.got == [1, 2, 3] and f.rest_from == [2] and f.outcomes == ["nudge"]
    await f.stream.aclose()


@pytest.mark.parametrize("answer", ["fails", "leaves-it-out"])
async def test_a_quiet_run_the_check_cannot_place_is_handed_over(
    bus: EventBus, answer: str
) -> None:
    f = Follower(await _listening(bus), tail=[2])
    f.got.append(1)

    async def positions(ids: list[str]) -> dict[str, int]:
        if answer == "fails":
            raise RuntimeError("the runtime is away")
        return {}

    watch = asyncio.create_task(watch_quiet(bus, 0.1, positions))
    try:
        await f.read(2)
    finally:
        watch.cancel()
    assert f.rest_from == [1] and f.outcomes == ["nudge"]
    await f.stream.aclose()


async def test_an_overflowed_subscription_is_handed_over(bus: EventBus) -> None:
    f = Follower(await _listening(bus), tail=range(2, QUEUE_LIMIT + 50))
    run_id = f.run_id
    f.got.append(1)
    for seq in range(2, QUEUE_LIMIT + 40):  # more than the queue holds, before any is read
        await bus.publish(run_id, [_delta(run_id, seq)])
    async with asyncio.timeout(10):
        while not f.listening.sub.overflowed:
            await asyncio.sleep(0.02)
    await f.read(QUEUE_LIMIT + 49)
    assert f.got == list(range(1, QUEUE_LIMIT + 50)) and f.outcomes == ["overflow"]
    await f.stream.aclose()


async def test_a_feed_that_closes_first_drops_the_subscription(bus: EventBus) -> None:
    f = Follower(await _listening(bus))
    f.got.append(1)
    await bus.publish(f.run_id, [_delta(f.run_id, 2)])
    await f.read(2)
    await f.stream.aclose()
    assert f.outcomes == ["left"] and bus.subscriptions() == []


def _answer(run_id: str, events: Sequence[bytes] = ()) -> rs.StartRunResponse:
    return rs.StartRunResponse(
        run=resources_pb2.Run(id=run_id),
        events=[events_pb2.RunEvent.FromString(e) for e in events],
    )


async def test_a_start_on_the_bus_names_the_run_and_keeps_listening(bus: EventBus) -> None:
    asked: list[rs.StartRunRequest] = []

    async def start(req: rs.StartRunRequest) -> rs.StartRunResponse:
        assert len(bus.subscriptions()) == 1  # subscribed, and confirmed, before the start
        assert bus.subscriptions()[0].subscribed.is_set()
        asked.append(req)
        return _answer(req.run_id, [_delta(req.run_id, 1)])

    got = await start_on_bus(bus, start, rs.StartRunRequest(conversation_id="c", text="hi"))
    assert got is not None
    answer, started = got
    assert started is not None and [e.sequence for e in started.first] == [1]
    listening = started.listening
    assert listening.sub.run_id == asked[0].run_id == answer.run.id
    assert listening.sub.position == 1  # what the answer delivered: the bus's part goes on from it
    assert asked[0].run_id.startswith("run_")
    listening.close()
    assert bus.subscriptions() == []


async def test_a_start_the_bus_cannot_serve_keeps_no_subscription(
    bus: EventBus, redis_url: str
) -> None:
    async def other_run(req: rs.StartRunRequest) -> rs.StartRunResponse:
        return _answer(new_id("run"))  # a replayed start, or a runtime that ignores run_id

    async def fails(req: rs.StartRunRequest) -> rs.StartRunResponse:
        raise RuntimeError("the runtime refused")

    async def never(req: rs.StartRunRequest) -> rs.StartRunResponse:
        raise AssertionError("started without a bus to follow on")

    req = rs.StartRunRequest(conversation_id="c", text="hi")
    got = await start_on_bus(bus, other_run, req)
    assert got is not None and got[1] is None and bus.subscriptions() == []
    with pytest.raises(RuntimeError):
        await start_on_bus(bus, fails, rs.StartRunRequest(conversation_id="c", text="hi"))
    assert bus.subscriptions() == []
    assert await start_on_bus(None, never, req) is None
    down = EventBus(redis_url)  # never started: not connected
    try:
        assert await start_on_bus(down, never, req) is None
    finally:
        await down.close()


async def test_a_reader_of_the_whole_log_gets_the_answer_then_the_bus_then_the_runtime(
    bus: EventBus,
) -> None:
    """start_followed, as the LangGraph, AG-UI and AI SDK mounts start a run they read whole:
    StartRun's first event, the bus's batches, and at a gap the runtime's stream from the last
    event read; the subscription gone when the reading ends."""

    async def start(req: rs.StartRunRequest) -> rs.StartRunResponse:
        return _answer(req.run_id, [_delta(req.run_id, 1)])

    answer, on_bus = await bus_feed.start_followed(bus, start, rs.StartRunRequest(text="hi"))
    assert on_bus is not None and [e.sequence for e in on_bus.first] == [1]
    run_id = answer.run.id
    got: list[int] = []
    rest_from: list[int] = []
    outcomes: list[str] = []

    async def rest() -> Batches:  # type: ignore[misc]
        rest_from.append(got[-1])
        yield [events_pb2.RunEvent.FromString(_delta(run_id, 3))]
        yield [events_pb2.RunEvent.FromString(_done(run_id, 4))]

    with bus_feed.held(on_bus):
        async with asyncio.timeout(10):
            await bus.publish(run_id, [_delta(run_id, 2)])
            await bus.publish(run_id, [_done(run_id, 4)])  # 3 was lost
            async for batch in on_bus.follow(rest, outcomes.append):
                got.extend(e.sequence for e in batch)
                if got[-1] == 4:
                    break
    assert got == [1, 2, 3, 4] and rest_from == [2] and outcomes == ["gap"]
    assert bus.subscriptions() == []

    # A reader that leaves at the first event: the subscription goes, and is told as `left`, also
    # when its handler's `held` released the subscription first (as a stream's end does: the
    # handler returns before its cancelled source unwinds).
    for handler_first in (False, True):
        _, on_bus = await bus_feed.start_followed(bus, start, rs.StartRunRequest(text="hi"))
        assert on_bus is not None
        outcomes.clear()
        reading = on_bus.follow(rest, outcomes.append)
        with bus_feed.held(on_bus):
            assert [e.sequence for e in await anext(reading)] == [1]
            if not handler_first:
                await reading.aclose()
        await reading.aclose()
        assert outcomes == ["left"] and bus.subscriptions() == []


async def test_a_start_whose_reading_never_began_releases_its_subscription(
    bus: EventBus,
) -> None:
    """A lookup that fails between the start and the stream: `held` releases what `follow`
    would have; without a bus, or for a replayed start, the start is plain and nothing is held."""

    async def start(req: rs.StartRunRequest) -> rs.StartRunResponse:
        return _answer(req.run_id, [_delta(req.run_id, 1)])

    async def replayed(req: rs.StartRunRequest) -> rs.StartRunResponse:
        return _answer(new_id("run"))

    _, on_bus = await bus_feed.start_followed(bus, start, rs.StartRunRequest(text="hi"))
    assert on_bus is not None and len(bus.subscriptions()) == 1
    with pytest.raises(LookupError), bus_feed.held(on_bus):
        raise LookupError("the agent's kind could not be read")
    assert bus.subscriptions() == [] and on_bus.listening.closed
    plain = rs.StartRunRequest(text="hi")
    _, none = await bus_feed.start_followed(None, start, plain)
    assert none is None and plain.run_id == ""  # no bus: the runtime names the run
    _, none = await bus_feed.start_followed(bus, replayed, rs.StartRunRequest(text="hi"))
    assert none is None and bus.subscriptions() == []


async def test_the_positioning_check_asks_in_calls_of_at_most_the_limit(
    bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_feed, "POSITIONS_PER_CALL", 2)
    listenings = [await _listening(bus) for _ in range(5)]
    behind = listenings[3].sub.run_id
    asked: list[list[str]] = []

    async def positions(ids: list[str]) -> dict[str, int]:
        asked.append(ids)
        return {i: 5 if i == behind else 0 for i in ids}

    for listening in listenings:
        listening.sub.last_heard = 0.0  # quiet since long ago
    watch = asyncio.create_task(watch_quiet(bus, 0.05, positions))
    try:
        async with asyncio.timeout(10):
            while listenings[3].sub.queue.empty():
                await asyncio.sleep(0.01)
    finally:
        watch.cancel()
    first_round = asked[:3]
    assert [len(ids) for ids in first_round] == [2, 2, 1]
    assert sorted(i for ids in first_round for i in ids) == sorted(x.sub.run_id for x in listenings)
    # Only the run behind was nudged (an empty message); the others stay as they were.
    assert [not x.sub.queue.empty() for x in listenings] == [False, False, False, True, False]
    for listening in listenings:
        listening.close()
