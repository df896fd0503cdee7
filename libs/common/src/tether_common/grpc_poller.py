"""Keep grpc.aio's completion poller from blocking.

grpc.aio (grpcio 1.58 to 1.85 at least) hands completions from gRPC core to the event loop
through a thread: for each completion it queues the event and writes ONE byte to a socketpair
whose other end the loop watches. The loop's reader reads one byte per wake-up but handles every
queued event. Under a burst, completions come faster than the loop turns, so bytes pile up; once
the socket's buffer is full the thread blocks in write(2), with the write end left blocking.
From then on it takes no completion from core until the loop has read the buffer back to a quarter
(the kernel's wake-up mark for a unix socket), one byte per loop turn. Every send, read and unary
call of the process stalls together meanwhile: 250-540 ms at a time in the bench's fan-out, where
the gateway had already received the messages whose sends had not completed.

With the write end non-blocking the thread never stops polling. A byte that does not fit is
dropped, and that loses nothing: the buffer is full of bytes that will wake the loop, and each
wake-up handles every queued event."""

from __future__ import annotations

import gc
import logging
import socket

from grpc._cython import cygrpc  # type: ignore[attr-defined]  # (not in the typing stubs)

log = logging.getLogger(__name__)


def unblock_completion_poller() -> int:
    """Make the sockets of every grpc.aio completion poller in this process non-blocking. Call it
    after creating a grpc.aio server or channel (that is when grpc.aio starts its poller) and
    before `gc.freeze()`, which hides objects from the scan. Returns how many sockets it switched;
    a poller whose socketpair it cannot find (grpc's internals changed) is logged as a warning."""
    switched = 0
    for poller in pollers():
        sockets = _sockets_of(poller)
        if len(sockets) != 2:
            log.warning("grpc.aio poller: expected its socketpair, found %d sockets", len(sockets))
            continue
        for sock in sockets:
            if sock.getblocking():
                sock.setblocking(False)
                switched += 1
    return switched


def poller_sockets() -> list[socket.socket]:
    """The sockets of this process's grpc.aio completion pollers (for tests and diagnostics)."""
    return [sock for poller in pollers() for sock in _sockets_of(poller)]


def pollers() -> list[object]:
    """This process's grpc.aio completion pollers (one while grpc.aio is in use)."""
    return [o for o in gc.get_objects() if isinstance(o, cygrpc.PollerCompletionQueue)]


def _sockets_of(poller: object) -> list[socket.socket]:
    return [r for r in gc.get_referents(poller) if isinstance(r, socket.socket)]
