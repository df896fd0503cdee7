"""TETHER_RUNTIME_ROLE takes one of three values; anything else stops the process with a clear
error instead of silently running as something else."""

from __future__ import annotations

import pytest
from tether_common.config import Settings
from tether_common.errors import UnsafeSettings


@pytest.mark.parametrize("role", ["all", "api", "worker"])
def test_known_roles(role: str) -> None:
    assert Settings.from_env({"TETHER_RUNTIME_ROLE": role}).runtime_role == role


def test_default_role_is_all() -> None:
    assert Settings.from_env({}).runtime_role == "all"


@pytest.mark.parametrize("role", ["", "API", "workers", "both"])
def test_unknown_role_is_refused(role: str) -> None:
    with pytest.raises(UnsafeSettings, match="TETHER_RUNTIME_ROLE"):
        Settings.from_env({"TETHER_RUNTIME_ROLE": role})
