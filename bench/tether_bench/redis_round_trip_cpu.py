"""The client's CPU per round trip to Redis: redis-py's pipeline against the held connection of
`tether_common.redis_round_trip` (the gateway's script calls, the runtime's publishes), and a
lone command through the client, on uvloop as the services run.

`PYTHONPATH=bench uv run --frozen python -m tether_bench.redis_round_trip_cpu [REDIS_URL]`
prints JSON: µs of this process's CPU (`time.process_time`) and of wall time per round trip of
two EVALSHA (`_2`) or one (`_1`), each way alternated three times, medians."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import uvloop
from tether_common.redis_round_trip import RoundTrip

_SCRIPT = "return redis.call('PTTL', KEYS[1])"
_CALLS = 5000


async def _per_call(call: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    for _ in range(500):
        await call()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(_CALLS):
        await call()
    return (
        1e6 * (time.process_time() - cpu) / _CALLS,
        1e6 * (time.perf_counter() - wall) / _CALLS,
    )


async def main(url: str) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    trip = RoundTrip(client)
    try:
        sha = await client.script_load(_SCRIPT)

        async def pipeline() -> Any:
            async with client.pipeline(transaction=False) as pipe:
                pipe.evalsha(sha, 1, "bench:a", 1)
                pipe.evalsha(sha, 1, "bench:b", 2)
                return await pipe.execute(raise_on_error=False)

        async def held() -> Any:
            return await trip.send(
                [("EVALSHA", sha, 1, "bench:a", 1), ("EVALSHA", sha, 1, "bench:b", 2)]
            )

        async def lone() -> Any:
            return await client.evalsha(sha, 1, "bench:a", 1)

        async def held_lone() -> Any:
            return await trip.send([("EVALSHA", sha, 1, "bench:a", 1)])

        ways = {
            "redis_py_pipeline_2": pipeline,
            "held_connection_2": held,
            "client_lone_1": lone,
            "held_connection_1": held_lone,
        }
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for _ in range(3):
            for name, call in ways.items():
                runs[name].append(await _per_call(call))
        return {
            name: {
                "cpu_us": round(statistics.median(c for c, _ in got), 1),
                "wall_us": round(statistics.median(w for _, w in got), 1),
            }
            for name, got in runs.items()
        }
    finally:
        await client.aclose()


if __name__ == "__main__":
    url = (sys.argv[1:] or [os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")])[0]
    print(json.dumps(uvloop.run(main(url)), indent=2))
