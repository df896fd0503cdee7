"""TETHER_PROCESSES: a count, or auto / 0 for the CPUs the pod may use (its cgroup CPU limit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether_common.config import Settings
from tether_common.cpus import available_cpus, parse_processes
from tether_common.errors import UnsafeSettings


def test_default_is_one_process() -> None:
    assert Settings.from_env({}).processes == 1
    assert Settings.from_env({"TETHER_PROCESSES": "3"}).processes == 3


def test_auto_and_zero_mean_the_cpus_available() -> None:
    assert parse_processes("X", "auto") == available_cpus()
    assert parse_processes("X", "0") == available_cpus()
    assert available_cpus() >= 1


@pytest.mark.parametrize("raw", ["-1", "two", "1.5x"])
def test_a_bad_count_is_refused(raw: str) -> None:
    with pytest.raises(UnsafeSettings, match="TETHER_PROCESSES"):
        Settings.from_env({"TETHER_PROCESSES": raw})


def test_the_cgroup_cpu_limit_caps_the_count(tmp_path: Path) -> None:
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # limits.cpu: 1500m -> 2 processes
    assert available_cpus(str(cpu_max)) == min(2, available_cpus(str(tmp_path / "none")))
    cpu_max.write_text("50000 100000\n")  # 500m: still one process
    assert available_cpus(str(cpu_max)) == 1
    cpu_max.write_text("max 100000\n")  # no limit: every CPU it may run on
    assert available_cpus(str(cpu_max)) == available_cpus(str(tmp_path / "none"))
