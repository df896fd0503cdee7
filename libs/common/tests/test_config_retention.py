"""TETHER_EVENT_RETENTION_S: 30 days by default, 0 keeps events forever, and anything shorter than
a day (the event log's partition) is refused at start."""

from __future__ import annotations

import pytest
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings


def test_default_forever_and_a_chosen_value() -> None:
    assert Settings.from_env({}).event_retention_s == 30 * 86400
    assert Settings.from_env({"TETHER_EVENT_RETENTION_S": "0"}).event_retention_s == 0
    assert Settings.from_env({"TETHER_EVENT_RETENTION_S": "86400"}).event_retention_s == 86400


@pytest.mark.parametrize("value", ["3600", "-1", "86399"])
def test_less_than_a_day_is_refused(value: str) -> None:
    with pytest.raises(UnsafeSettings, match="TETHER_EVENT_RETENTION_S"):
        Settings.from_env({"TETHER_EVENT_RETENTION_S": value})
