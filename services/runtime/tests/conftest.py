"""The runtime these tests talk to serves in the test process (tether_testkit.in_process): they
start no process of their own, and test its API, not its process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tether_testkit.in_process import InProcessRuntime, in_process_runtime


@pytest.fixture(scope="session")
async def runtime(base_env: dict[str, str]) -> AsyncIterator[InProcessRuntime]:
    """One shared runtime for the session (the root conftest's is a process)."""
    async with in_process_runtime(base_env) as served:
        yield served
