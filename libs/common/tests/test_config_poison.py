"""The poison-run settings: defaults, read from the environment, and values refused at start."""

from __future__ import annotations

import pytest
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings


def test_defaults_and_environment() -> None:
    default = Settings.from_env({})
    assert default.max_run_attempts == 5 and default.run_retry_backoff_s == 1.0
    s = Settings.from_env({"TETHER_MAX_RUN_ATTEMPTS": "3", "TETHER_RUN_RETRY_BACKOFF_S": "0.25"})
    assert s.max_run_attempts == 3 and s.run_retry_backoff_s == 0.25


@pytest.mark.parametrize(
    ("name", "value"),
    [("TETHER_MAX_RUN_ATTEMPTS", "0"), ("TETHER_RUN_RETRY_BACKOFF_S", "-1")],
)
def test_values_that_would_break_the_protection_are_refused(name: str, value: str) -> None:
    with pytest.raises(UnsafeSettings, match=name):
        Settings.from_env({name: value})
