"""The CPUs a pod may use, and a process count read from a setting or flag."""

from __future__ import annotations

import os

from tether_common.errors import UnsafeSettings


def parse_processes(name: str, raw: str) -> int:
    """A process count: a positive number, or "auto" / 0 for the CPUs this pod may use."""
    raw = raw.strip().lower() or "1"
    if raw == "auto":
        return available_cpus()
    try:
        n = int(raw)
    except ValueError:
        raise UnsafeSettings(f"{name}={raw!r} is not a process count (a number, or auto)") from None
    if n < 0:
        raise UnsafeSettings(f"{name}={raw!r} is not a process count (a number, or auto)")
    return n or available_cpus()


def available_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The CPUs this process may use: the cgroup v2 CPU limit (a pod's `limits.cpu`, rounded
    up) when one is set, else the CPUs it is allowed to run on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        quota, period = open(cpu_max).read().split()[:2]  # noqa: SIM115, PTH123 - one read
    except (OSError, ValueError):
        return max(1, cpus or 1)
    if quota == "max":
        return max(1, cpus or 1)
    return max(1, min(cpus or 1, -(-int(quota) // int(period))))
