"""A provider's raw stream as both adapters read it: the SDK's exceptions mapped to ModelError,
raised `from None` (the SDK's text can quote the provider's answer, which may echo a masked key),
and the request's total deadline enforced between items."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from tether_sdk import ModelError

from tether_runtime.models.errors import Origin, dropped, to_model_error


async def guarded_stream(
    open_stream: Callable[[], Awaitable[Any]], origin: Origin, timeout_s: float
) -> AsyncGenerator[Any, None]:
    """The items of the stream `open_stream()` returns (an SDK stream: an async context manager
    and iterator). Use it under `contextlib.aclosing` so the SDK stream closes with the loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    try:
        stream = await open_stream()
    except Exception as err:
        raise to_model_error(err, origin) from None
    try:
        async with stream:
            async for item in stream:
                yield item
                if loop.time() > deadline:
                    raise dropped(origin, f"took over {timeout_s:g}s to answer")
    except ModelError:
        raise
    except Exception as err:
        raise to_model_error(err, origin) from None
