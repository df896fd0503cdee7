"""Counting the round trips made on a redis.asyncio client's held connection
(tether_common.redis_round_trip: the gateway's script calls, the runtime's publishes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from tether_common.redis_round_trip import RoundTrip


def count_round_trips(client: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on (to the test's end), the number of commands in each round trip made on
    `client`'s held connection, in order."""
    sizes: list[int] = []
    real = RoundTrip.send

    async def counted(trip: RoundTrip, commands: Sequence[Sequence[Any]]) -> list[Any]:
        if trip._client is client:
            sizes.append(len(commands))
        return await real(trip, commands)

    monkeypatch.setattr(RoundTrip, "send", counted)
    return sizes
