"""Round trips on a held connection (tether_common.redis_round_trip): answers in order, each
command's error its own, and a connection whose round trip was broken off never reused half
read."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from tether_common.redis_round_trip import RoundTrip


async def test_answers_come_in_order_and_an_error_is_its_commands_alone(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    trip = RoundTrip(client)
    key = f"unit:{uuid.uuid4().hex}"
    try:
        answers = await trip.send(
            [
                ("SET", key, "v", "EX", 60),
                ("HGET", key, "field"),  # WRONGTYPE: a string is not a hash
                ("EVALSHA", "0" * 40, 0),  # a script Redis does not know
                ("GET", key),
            ]
        )
        assert answers[0] is True or answers[0] == b"OK"
        assert isinstance(answers[1], ResponseError) and "WRONGTYPE" in str(answers[1])
        assert isinstance(answers[2], NoScriptError)
        assert answers[3] == b"v"
        assert await trip.send([("ECHO", "again")]) == [b"again"]  # the same connection, clean
        assert not trip.busy
    finally:
        await client.delete(key)
        await client.aclose()


async def test_a_round_trip_broken_off_drops_its_connection(redis_url: str) -> None:
    """A caller's bound that runs out mid-read (the gateway's and the bus's bound a round trip as
    a whole) leaves an answer owed on that connection: the next round trip dials a new one and
    reads its own answers, not the one the first was waiting for."""
    client = aioredis.Redis.from_url(redis_url)
    trip = RoundTrip(client)
    key = f"unit:{uuid.uuid4().hex}"
    try:
        (first_id,) = await trip.send([("CLIENT", "ID")])
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await trip.send([("BLPOP", key, 0.3)])  # nil after 0.3 s, owed to this read
        assert not trip.busy
        await asyncio.sleep(0.4)  # the owed answer would be in the socket by now
        (second_id,) = await trip.send([("CLIENT", "ID")])
        assert second_id != first_id, "the broken connection was reused"
        assert await trip.send([("ECHO", "mine")]) == [b"mine"]
    finally:
        await client.aclose()


async def test_a_connection_redis_closed_between_round_trips_is_dialled_again_first(
    redis_url: str,
) -> None:
    """A held connection Redis closed since the last round trip (a restart, an idle timeout; here
    CLIENT KILL) is dialled again before the next one writes, so that round trip does not fail
    (redis-py 8.1's own calls do fail once there: its pool skips that check by default). One
    killed while its round trip is in flight fails that one (no retry behind the caller's back:
    the clients' Retry is 0), and the next dials again."""
    client = aioredis.Redis.from_url(redis_url)
    trip = RoundTrip(client)
    key = f"unit:{uuid.uuid4().hex}"
    try:
        (conn_id,) = await trip.send([("CLIENT", "ID")])
        await client.execute_command("CLIENT", "KILL", "ID", conn_id)
        await asyncio.sleep(0.1)  # the loop reads the FIN
        assert await trip.send([("ECHO", "after a kill")]) == [b"after a kill"]
        (conn_id,) = await trip.send([("CLIENT", "ID")])
        in_flight = asyncio.ensure_future(trip.send([("BLPOP", key, 2)]))
        await asyncio.sleep(0.1)
        await client.execute_command("CLIENT", "KILL", "ID", conn_id)
        with pytest.raises(RedisConnectionError):
            await in_flight
        assert await trip.send([("ECHO", "back")]) == [b"back"]
    finally:
        await client.aclose()


async def test_one_round_trip_at_a_time_and_the_client_closes_the_connection(
    redis_url: str,
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    trip = RoundTrip(client)
    key = f"unit:{uuid.uuid4().hex}"
    first = asyncio.ensure_future(trip.send([("BLPOP", key, 0.2)]))
    await asyncio.sleep(0.05)
    assert trip.busy
    with pytest.raises(RuntimeError, match="in flight"):
        await trip.send([("ECHO", "overlap")])
    assert await first == [None]
    held = trip._conn
    assert held.is_connected
    await client.aclose()
    assert not held.is_connected, "the client's aclose() closes the held connection"
