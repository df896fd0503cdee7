"""grpc.aio's completion poller keeps taking completions from gRPC core while its wake-up
socketpair is full (see tether_common.grpc_poller)."""

from __future__ import annotations

import asyncio
import gc
import platform
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest
from tether_common.grpc_poller import poller_sockets, pollers, unblock_completion_poller

# The write(2) system call's number, as /proc/<tid>/syscall shows it, by architecture.
WRITE = {"x86_64": 1, "aarch64": 64}[platform.machine()]


def _echo(request: bytes, context: Any) -> bytes:
    return request


def _count(request: bytes, context: Any) -> Iterator[bytes]:
    for i in range(int(request)):
        yield str(i).encode()


@pytest.fixture
async def channel() -> AsyncIterator[grpc.aio.Channel]:
    """A grpc.aio channel to a real server that answers from threads of its own (grpc's sync
    server), so calls complete in gRPC core even while this event loop is busy."""
    server = grpc.server(ThreadPoolExecutor(2))
    handlers = {
        "Echo": grpc.unary_unary_rpc_method_handler(_echo),
        "Count": grpc.unary_stream_rpc_method_handler(_count),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Test", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    chan = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    assert await chan.unary_unary("/t.Test/Echo")(b"warm") == b"warm"
    try:
        yield chan
    finally:
        await chan.close()
        server.stop(None)


def _ends() -> tuple[socket.socket, socket.socket]:
    """The poller's socketpair: (read end, write end). grpc makes the pair with socketpair(2),
    which numbers the read end first."""
    read_end, write_end = sorted(poller_sockets(), key=lambda s: s.fileno())
    return read_end, write_end


def _poller_thread_id() -> int:
    threads = [r for p in pollers() for r in gc.get_referents(p) if isinstance(r, threading.Thread)]
    assert len(threads) == 1
    native_id = threads[0].native_id
    assert native_id is not None
    return native_id


def _fill(sock: socket.socket) -> None:
    """Write one-byte wake-ups, as the poller does, until the socket's buffer is full."""
    blocking = sock.getblocking()
    sock.setblocking(False)
    try:
        while True:
            sock.send(b"1")
    except BlockingIOError:
        pass
    finally:
        sock.setblocking(blocking)


def _blocked_writing(thread_id: int, fd: int) -> bool:
    with open(f"/proc/self/task/{thread_id}/syscall") as f:
        fields = f.read().split()
    return fields[0] == str(WRITE) and int(fields[1], 16) == fd


async def _poller_blocks_while_the_loop_is_busy(chan: grpc.aio.Channel) -> bool:
    """Start 20 calls, fill the wake-up socket, then keep the loop busy for up to a second (as a
    crowded loop is) while the calls complete in core: does the poller thread end up blocked in
    write(2) on the socket?"""
    _, write_end = _ends()
    thread_id = _poller_thread_id()
    echo = chan.unary_unary("/t.Test/Echo")
    calls = [asyncio.ensure_future(echo(b"x")) for _ in range(20)]
    await asyncio.sleep(0)  # the calls start
    _fill(write_end)
    blocked = False
    until = time.monotonic() + 1.0
    while not blocked and time.monotonic() < until:  # no await: the loop reads nothing
        blocked = _blocked_writing(thread_id, write_end.fileno())
        time.sleep(0.001)
    assert await asyncio.gather(*calls) == [b"x"] * 20
    return blocked


async def test_the_pollers_socketpair_is_found_and_made_non_blocking(
    channel: grpc.aio.Channel,
) -> None:
    unblock_completion_poller()
    # If grpc's internals change so that the pair is not found, this fails: the fix would no
    # longer apply.
    assert [s.getblocking() for s in _ends()] == [False, False]
    assert unblock_completion_poller() == 0  # nothing left to switch


async def test_with_a_non_blocking_write_end_the_poller_never_blocks(
    channel: grpc.aio.Channel,
) -> None:
    _, write_end = _ends()
    # As grpc leaves it: the poller thread blocks in write(2) once the socket is full, and takes
    # no completion from core until the loop has read the buffer back down.
    write_end.setblocking(True)
    try:
        # On a loaded machine one try may see every completion land before the socket is full:
        # the control needs to see the block once.
        blocked = False
        for _ in range(5):
            blocked = await _poller_blocks_while_the_loop_is_busy(channel)
            if blocked:
                break
        assert blocked
    finally:
        unblock_completion_poller()
    assert not write_end.getblocking()
    for _ in range(3):
        assert not await _poller_blocks_while_the_loop_is_busy(channel)


async def test_nothing_is_lost_while_wake_ups_are_dropped(channel: grpc.aio.Channel) -> None:
    unblock_completion_poller()
    _, write_end = _ends()
    echo = channel.unary_unary("/t.Test/Echo")
    count = channel.unary_stream("/t.Test/Count")
    for _ in range(3):
        _fill(write_end)
        streamed = [m async for m in count(b"2000")]
        assert streamed == [str(i).encode() for i in range(2000)]
        _fill(write_end)
        answers = await asyncio.gather(*(echo(str(i).encode()) for i in range(200)))
        assert answers == [str(i).encode() for i in range(200)]
