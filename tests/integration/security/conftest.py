"""Security tests: real runtime and gateway processes; every test acts as users of its own, so
per-user rate limits and other tests' runs never get in the way."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest
from tether_testkit.processes import Proc, start_gateway
from tether_testkit.security import GATEWAY_LEEWAY_S


@pytest.fixture(scope="module")
def gateway(runtime: Proc, base_env: dict[str, str]) -> Iterator[Proc]:
    env = {**base_env, "TETHER_JWT_LEEWAY_S": str(GATEWAY_LEEWAY_S)}
    proc = start_gateway(env, runtime.addr, name="gateway-sec")
    yield proc
    proc.terminate()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session
