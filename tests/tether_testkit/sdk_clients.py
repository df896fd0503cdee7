"""Model providers' SDK clients closed at their test's end, not left to the SDK's finalizer.

The openai and anthropic clients schedule their close from a finalizer, on whatever loop runs when
the garbage collector finds them; the close then removes the event loop's reader by a file number
that may by then belong to another socket (a later test's listening socket, which then accepted
nothing: the gateway's SSE tests hung in the same process). A test module keeps the providers it
opens in a list and gets an autouse fixture that closes them:

    OPEN: list[Any] = []
    close_providers = closes_at_test_end(OPEN)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest


def closes_at_test_end(opened: list[Any]) -> Any:
    """An autouse fixture that awaits `aclose()` on everything in `opened` after each test."""

    @pytest.fixture(autouse=True)
    async def close_providers() -> AsyncIterator[None]:
        yield
        while opened:
            await opened.pop().aclose()

    return close_providers
