"""`make test-fast`: the tests that start no process, held to it. Loaded with
`-p tether_testkit.no_processes`, every way of starting a process (subprocess and asyncio's
subprocesses, fork, posix_spawn) while a test runs (its set-up, call and tear-down) fails the test
that tries, naming what it started: such a test
is marked `process` (it runs in `make test` only). The one exception is the embedded Postgres or
Redis a machine without local servers falls back to (tether_testkit.stores): a store, not a test's
process. Under pytest-xdist the controller starts the workers; the workers are guarded."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_allowed = 0
_armed = False
_original_popen_init = subprocess.Popen.__init__


class ProcessStarted(AssertionError):
    """A test in `make test-fast` started a process."""


@contextlib.contextmanager
def store_processes() -> Iterator[None]:
    """The embedded stores' servers may start here (tether_testkit.stores)."""
    global _allowed
    _allowed += 1
    try:
        yield
    finally:
        _allowed -= 1


def _refused(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if _allowed or not _armed:
            return original(*args, **kwargs)
        argv = args[1] if what == "subprocess.Popen" and len(args) > 1 else args[:1]
        raise ProcessStarted(
            f"{what}({argv!r}) in `make test-fast`: this test starts a process; mark it "
            "`@pytest.mark.process` (it then runs in `make test` only)"
        )

    return guarded


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller: it starts the workers, which load this plugin too
    subprocess.Popen.__init__ = _refused(  # type: ignore[method-assign]
        "subprocess.Popen", _original_popen_init
    )
    os.fork = _refused("os.fork", os.fork)
    os.posix_spawn = _refused("os.posix_spawn", os.posix_spawn)
    os.posix_spawnp = _refused("os.posix_spawnp", os.posix_spawnp)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    global _armed
    _armed = True
    try:
        yield
    finally:
        _armed = False
