"""Free ports for the processes a test starts, none of which two test processes can draw at once.

A port from the kernel (bind to port 0, then close) is only free for a moment: the next bind to
port 0 anywhere on the machine, or an outgoing connection's local port, may be given the same
one, and `make test` runs several pytest workers, each starting hundreds of servers. Ports here
come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range starts at 32768), so
no outgoing connection takes one, and each xdist worker has a slice of its own, handed out in
turn; a port some other program holds is skipped (a bind test)."""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator

FIRST, LAST = 20_000, 32_000  # below the ephemeral range
SLICES = 8  # xdist workers gw0..gw7 (more wrap around and share)


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % SLICES if worker.isdigit() else 0
    size = (LAST - FIRST) // SLICES
    return range(FIRST + index * size, FIRST + (index + 1) * size)


def _candidates() -> Iterator[int]:
    ports = _slice()
    start = random.randrange(len(ports))  # a new session starts elsewhere in its slice
    return (ports[(start + i) % len(ports)] for i in itertools.count())


_NEXT = _candidates()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on or is bound to now, and that no other test
    process of this run will hand out."""
    for _, port in zip(range(len(_slice())), _NEXT, strict=False):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))  # no SO_REUSEADDR: a port in TIME_WAIT is skipped too
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_slice()}")
