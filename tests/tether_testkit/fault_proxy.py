"""A fault-injecting TCP proxy for a link between two test processes: latency with jitter,
"loss", a bandwidth cap, half-open silence (of every connection, or only of those open now) and
resets, changed while connections stay open.

No well-kept proxy of this kind installs here (toxiproxy is a Go binary that Debian does not
package; the kernel has no netem), so this is a small one. TCP cannot lose bytes: what a lossy
link does to a TCP stream is stall it while the sender retransmits, so "loss" here holds a chunk
back for a retransmission timeout (`stall_s`) with probability `loss`, and every later chunk of
that direction waits behind it (head-of-line blocking), as on a real link. Order is kept: a chunk
is never delivered before the one read before it.

It runs its own event loop in a thread, so a test's own loop (or a blocking call in it) delays
no forwarded byte, and faults set from the test apply to the next chunk."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

CHUNK = 65536


@dataclass
class Faults:
    """What one direction of the link does to the bytes it carries. Plain attributes, read by
    the proxy's thread for each chunk, so a test may change them at any time."""

    latency_s: float = 0.0
    jitter_s: float = 0.0  # each chunk's latency is uniform in latency ± jitter (never < 0)
    loss: float = 0.0  # probability that a chunk stalls as if lost and retransmitted
    stall_s: float = 0.2  # how long such a chunk waits (a retransmission timeout)
    bandwidth_bps: int = 0  # bytes per second, 0: no cap
    silent: bool = False  # forward nothing and close nothing: the other end hears no FIN/RST

    def clear(self) -> None:
        self.latency_s = self.jitter_s = self.loss = 0.0
        self.bandwidth_bps = 0
        self.silent = False


@dataclass(eq=False)  # kept in a set, by identity
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    silent: bool = False  # this connection alone forwards nothing (silence_open)


class FaultProxy:
    """Listens on `listen` (host, port; port 0 picks one) and forwards each connection to
    `target`. `up` shapes client→target bytes, `down` target→client; `set()` shapes both."""

    def __init__(self, target: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)):
        self.target = target
        self.listen = listen
        self.up = Faults()
        self.down = Faults()
        self.accepted = 0
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        self.port = 0

    # -- the test's side ---------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.listen[0]

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> FaultProxy:
        ready = threading.Event()
        failed: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, self.listen[0], self.listen[1])
                )
                self.port = int(self._server.sockets[0].getsockname()[1])
            except BaseException as err:  # noqa: BLE001 - handed to the starting thread
                failed.append(err)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            # Connections still piping when the loop stopped: end them here, not at exit.
            loop.run_until_complete(_cancel_the_rest())
            loop.close()

        self._thread = threading.Thread(target=main, name=f"fault-proxy-{self.target}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failed:
            raise failed[0]
        return self

    def stop(self) -> None:
        """Close the listener and every connection (with a FIN), and end the thread."""
        if self._loop is None or self._thread is None:
            return
        self._call(self._close_all(rst=False, listener=True))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def set(self, **faults: float | bool) -> None:
        """Shape both directions, e.g. `set(latency_s=0.3, jitter_s=0.2, loss=0.3)`."""
        for side in (self.up, self.down):
            for name, value in faults.items():
                if not hasattr(side, name):
                    raise AttributeError(f"no fault named {name!r}")
                setattr(side, name, value)

    def clear(self) -> None:
        self.up.clear()
        self.down.clear()

    def reset(self) -> int:
        """Abort every open connection with a RST to both ends (SO_LINGER 0); new ones go on.
        Returns how many were reset."""
        return int(self._call(self._close_all(rst=True, listener=False)))

    def connections(self) -> int:
        return len(self._conns)

    def silence_open(self) -> int:
        """Half-open: the connections open now go dark both ways for good (as when a NAT forgets
        them), with no FIN and no RST; new connections work. Returns how many were silenced."""
        return int(self._call(self._silence_open()))

    def _call(self, coro: object) -> object:
        assert self._loop is not None, "the proxy is not started"
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        return fut.result(10)

    # -- the proxy's thread ------------------------------------------------------------------

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(c_writer)
            return
        conn = _Conn(c_writer, s_writer)
        self._conns.add(conn)
        conn.tasks = [
            asyncio.create_task(self._pipe(c_reader, s_writer, self.up, conn)),
            asyncio.create_task(self._pipe(s_reader, c_writer, self.down, conn)),
        ]
        try:
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            self._conns.discard(conn)
            for w in (c_writer, s_writer):
                with contextlib.suppress(Exception):
                    w.close()
            for w in (c_writer, s_writer):
                # Retrieves the connection's end (a reset is an error): left unread, it is
                # logged as "Future exception was never retrieved" when collected, wherever
                # that happens to be (source_ast.parse_file).
                with contextlib.suppress(Exception):  # a peer that never reads: given up
                    async with asyncio.timeout(1.0):
                        await w.wait_closed()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        faults: Faults,
        conn: _Conn,
    ) -> None:
        """One direction: a reader that stamps each chunk with its delivery time, and a writer
        that delivers in order, no sooner than stamped, within the bandwidth cap."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        done = asyncio.Event()

        async def read() -> None:
            last_due = 0.0
            try:
                while True:
                    while faults.silent or conn.silent:
                        await asyncio.sleep(0.02)
                    data = await reader.read(CHUNK)
                    if not data:
                        break
                    delay = max(0.0, faults.latency_s + self._rng.uniform(-1, 1) * faults.jitter_s)
                    if faults.loss and self._rng.random() < faults.loss:
                        delay += faults.stall_s
                    last_due = max(last_due, time.monotonic() + delay)
                    queue.put_nowait((last_due, data))
            finally:
                done.set()
                queue.put_nowait((0.0, b""))

        reading = asyncio.create_task(read())
        try:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                while faults.silent or conn.silent:
                    await asyncio.sleep(0.02)
                writer.write(data)
                await writer.drain()
                if faults.bandwidth_bps:
                    await asyncio.sleep(len(data) / faults.bandwidth_bps)
            if writer.can_write_eof():
                writer.write_eof()  # a half-close passed on as the peer sent it
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading

    async def _silence_open(self) -> int:
        for conn in self._conns:
            conn.silent = True
        return len(self._conns)

    async def _close_all(self, *, rst: bool, listener: bool) -> int:
        if listener and self._server is not None:
            self._server.close()
        conns = list(self._conns)
        for conn in conns:
            for w in (conn.client, conn.server):
                if rst:
                    _abort(w)
                else:
                    w.close()
            for t in conn.tasks:
                t.cancel()
        self._conns.clear()
        await asyncio.sleep(0)
        return len(conns)


async def _cancel_the_rest() -> None:
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a RST rather than a FIN: SO_LINGER on, with a zero timeout."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
