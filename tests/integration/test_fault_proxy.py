"""The test kit's fault proxy (tether_testkit.fault_proxy) on real sockets: it forwards bytes
exactly and in order, and each fault does what the partition tests rely on. Delays are checked
as lower bounds only (a loaded machine can only add time), silence by the absence of bytes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from tether_testkit.fault_proxy import FaultProxy

pytestmark = pytest.mark.timeout(60)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[str, int]]:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        w.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield ("127.0.0.1", int(server.sockets[0].getsockname()[1]))
    finally:
        server.close()


@contextlib.asynccontextmanager
async def proxied() -> AsyncIterator[tuple[FaultProxy, asyncio.StreamReader, asyncio.StreamWriter]]:
    async with echo_server() as target:
        proxy = FaultProxy(target).start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
            try:
                yield proxy, r, w
            finally:
                w.close()
        finally:
            await asyncio.to_thread(proxy.stop)


async def roundtrip(r: asyncio.StreamReader, w: asyncio.StreamWriter, data: bytes) -> bytes:
    w.write(data)
    await w.drain()
    return await asyncio.wait_for(r.readexactly(len(data)), 30)


async def test_bytes_pass_exactly_and_in_order_through_jitter_and_loss() -> None:
    async with proxied() as (proxy, r, w):
        proxy.set(latency_s=0.01, jitter_s=0.01, loss=0.3, stall_s=0.02)
        payload = b"".join(i.to_bytes(4, "big") for i in range(50_000))  # 200 kB, ordered
        w.write(payload)
        await w.drain()
        got = await asyncio.wait_for(r.readexactly(len(payload)), 30)
        assert got == payload


async def test_latency_delays_each_direction() -> None:
    async with proxied() as (proxy, r, w):
        assert await roundtrip(r, w, b"warm") == b"warm"
        proxy.up.latency_s = 0.3
        proxy.down.latency_s = 0.2
        t = time.monotonic()
        assert await roundtrip(r, w, b"ping") == b"ping"
        assert time.monotonic() - t >= 0.5


async def test_bandwidth_cap_slows_a_large_transfer() -> None:
    async with proxied() as (proxy, r, w):
        proxy.down.bandwidth_bps = 200_000
        t = time.monotonic()
        assert await roundtrip(r, w, b"x" * 300_000) == b"x" * 300_000
        assert time.monotonic() - t >= 1.0  # 300 kB at 200 kB/s, less the first chunk


async def test_silent_link_carries_nothing_and_closes_nothing_until_it_speaks_again() -> None:
    async with proxied() as (proxy, r, w):
        assert await roundtrip(r, w, b"before") == b"before"
        proxy.set(silent=True)
        w.write(b"during")
        await w.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.read(100), 1.0)  # no bytes, and no EOF either
        assert not r.at_eof()
        proxy.set(silent=False)
        assert await asyncio.wait_for(r.readexactly(6), 30) == b"during"


async def test_silence_open_darkens_the_open_connections_for_good_and_new_ones_work() -> None:
    async with proxied() as (proxy, r, w):
        assert await roundtrip(r, w, b"before") == b"before"
        assert await asyncio.to_thread(proxy.silence_open) == 1
        w.write(b"during")
        await w.drain()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(r.read(100), 1.0)  # no bytes, and no EOF either
        assert not r.at_eof()
        r2, w2 = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(r2, w2, b"new") == b"new"
        w2.close()


async def test_reset_aborts_open_connections_with_rst_and_new_ones_work() -> None:
    async with proxied() as (proxy, r, w):
        assert await roundtrip(r, w, b"hello") == b"hello"
        assert await asyncio.to_thread(proxy.reset) == 1
        with pytest.raises(ConnectionResetError):
            for _ in range(50):  # the RST arrives; the next read or write reports it
                w.write(b"more")
                await w.drain()
                if not await asyncio.wait_for(r.read(100), 5):
                    break
                await asyncio.sleep(0.05)
        r2, w2 = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await roundtrip(r2, w2, b"again") == b"again"
        w2.close()


def test_an_unknown_fault_is_refused() -> None:
    proxy = FaultProxy(("127.0.0.1", 1))
    with pytest.raises(AttributeError, match="no fault named 'latency'"):
        proxy.set(latency=1.0)
