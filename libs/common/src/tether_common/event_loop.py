"""The event loop a Tether service process runs on: uvloop by default, asyncio's own with
TETHER_UVLOOP=off (to compare the two, or where uvloop misbehaves)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], *, uvloop: bool = True) -> T:
    """Run `main` to its end on a new loop: uvloop when asked and installed, else asyncio's.
    Only the import is guarded: an ImportError raised while serving must not start a second
    server under plain asyncio."""
    if uvloop:
        try:
            import uvloop as _uvloop
        except ImportError:
            pass
        else:
            return _uvloop.run(main)
    return asyncio.run(main)


def name() -> str:
    """The running loop's kind, for the startup log: "uvloop" or "asyncio"."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
