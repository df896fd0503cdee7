"""TETHER_UVLOOP: the loop a service runs on."""

from __future__ import annotations

import pytest
from tether_common import event_loop
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings


async def _kind() -> str:
    return event_loop.name()


def test_uvloop_by_default() -> None:
    assert Settings.from_env({}).uvloop is True
    assert event_loop.run(_kind(), uvloop=Settings.from_env({}).uvloop) == "uvloop"


def test_off_runs_asyncio() -> None:
    settings = Settings.from_env({"TETHER_UVLOOP": "0"})
    assert event_loop.run(_kind(), uvloop=settings.uvloop) == "asyncio"


def test_bad_value_is_refused() -> None:
    with pytest.raises(UnsafeSettings, match="TETHER_UVLOOP"):
        Settings.from_env({"TETHER_UVLOOP": "maybe"})
