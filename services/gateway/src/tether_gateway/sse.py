"""SSE (DESIGN section 6): each connection follows its run's shared feed (one StreamRunEvents call
per run per process, run_feed.py) or a dedicated call of its own; `retry:` first, pre-encoded
frames written coalesced, heartbeats when idle, a bounded per-connection buffer, drain on exit;
a `reauthenticate` frame and the end when the token that opened it expires or is revoked.

The one SSE writer of the gateway: a stream that is not a run's (the approvals inbox) brings its
own `source` and gets the same writer, disconnect handling and stream-slot release."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

import grpc
from aiohttp import web
from tether.runtime.v1 import resources_pb2
from tether_common.event_json import TERMINAL_TYPES, sse_frame

from tether_gateway.run_feed import TERMINAL_STATUSES, RunFeed
from tether_gateway.runtime_client import Credential, follow_events
from tether_gateway.state import GatewayState
from tether_gateway.stream_grants import Reason, reauthenticate_frame

log = logging.getLogger(__name__)

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}
HEARTBEAT = b": keep-alive\n\n"
# The kernel's send buffer counts against a connection's budget too: without a cap, Linux grows
# it to megabytes for a client that never reads (tcp_wmem), and that memory is the gateway's.
_SNDBUF_MIN, _SNDBUF_MAX = 4096, 256 * 1024


# Feeds a stream that is not a run's: offers it frames until it returns (EventStream.source).
Source = Callable[["EventStream"], Coroutine[Any, Any, None]]


class SlowClient(Exception):
    """The client stopped reading and its queued bytes passed the per-connection limit."""


def is_finished(run: resources_pb2.Run, after: int) -> bool:
    """A reconnect to a finished run that has nothing left to send: answered 204."""
    return run.status in TERMINAL_STATUSES and after == run.last_sequence


class EventStream:
    """One SSE connection, fed by its run's shared feed (run_feed.py) or, when the feed cannot
    serve its resume point (older than the feed's ring), by a dedicated gRPC event stream of its
    own until it has caught up with the feed. A resume point ahead of the run gets `head` (a `reset` built from the caller's GetRun)
    first and then follows the feed from the run's real position; `ended`: nothing follows.
    `source`, for a stream that is not a run's: a coroutine that feeds it (`offer`) and ends it
    by returning; it should stop once `client_gone()` (the writer notices only at its next
    write, a heartbeat at most)."""

    def __init__(
        self,
        gw: GatewayState,
        request: web.Request,
        resp: web.StreamResponse,
        *,
        run_id: str,
        token: Credential,
        after: int,
        started: float,
        head: bytes = b"",
        ended: bool = False,
        expires_at: float | None = None,
        jtis: tuple[str, ...] = (),
        source: Source | None = None,
    ) -> None:
        self.gw = gw
        self.request = request
        self.resp = resp
        self.run_id = run_id
        self.token = token
        self.after = after
        self.started = started
        self.head = head
        self.ended = ended
        self.expires_at = expires_at
        self.jtis = jtis
        self.source = source
        self.limit = gw.settings.sse_buffer_bytes
        self._chunks: list[bytes] = []
        self._queued = 0
        self._events = 0
        self._waiter: asyncio.Future[bool] | None = None  # set while run() sleeps
        self._stopping = False
        self._dropped = False
        self._source_done = False
        self._feed: RunFeed | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._reauthenticating = False

    def stop(self) -> None:
        self._stopping = True
        self._wake()

    def stopping(self) -> bool:
        return self._stopping

    def client_gone(self) -> bool:
        """The client closed the connection: aiohttp drops a request's transport when it does."""
        transport = self.request.transport
        return transport is None or transport.is_closing()

    # An idle connection holds one future and one timer while it sleeps (no Event, no wait_for
    # task): thousands of them wait on one run.

    def _wake(self, woken: bool = True) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(woken)

    async def _sleep(self, delay_s: float) -> bool:
        """Wait for frames, the source's end or stop(); False when `delay_s` passed first."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(delay_s, self._wake, False)
        try:
            return bool(await waiter)
        finally:
            timer.cancel()
            self._waiter = None

    # -- the source side: a shared feed (offer/source_ended) or the dedicated pump --

    def offer(self, data: bytes, count: int) -> bool:
        """Queue frames for this connection; False when it is dropped as a slow reader."""
        if self._dropped or self._source_done:
            return False
        try:
            self._push(data, count)
        except SlowClient:
            self._dropped = True
            self.source_ended(None)
            return False
        return True

    def source_ended(self, error: BaseException | None) -> None:
        self._source_done = True
        self._wake()

    def reauthenticate(self, reason: Reason) -> None:
        """The token that opened this stream expired or was revoked: nothing more is read for
        it; what is queued goes out, then the `reauthenticate` frame, then the stream ends."""
        if self._reauthenticating or self._dropped:
            return
        self._reauthenticating = True
        if self._feed is not None:
            self._feed.leave(self)
            self._feed = None
        if self._pump_task is not None and not self._pump_task.done():
            self._pump_task.cancel()
        frame = reauthenticate_frame(reason)
        self._chunks.append(frame)
        self._queued += len(frame)
        self._source_done = True
        self._wake()
        self.gw.metrics.sse_reauthenticate.labels(reason).inc()

    def _watch_grant(self) -> None:
        if self.expires_at is None:
            return
        self._expiry = self.gw.grants.watch(self, self.jtis, self.expires_at)
        # Revoked between the request's check and now (the open awaited the runtime meanwhile).
        if any(self.gw.auth.revocations.is_revoked(j) for j in self.jtis):
            self.reauthenticate("revoked")

    def _unwatch_grant(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self.gw.grants.forget(self, self.jtis)

    def _pending(self) -> int:
        transport = self.request.transport
        return self._queued + (transport.get_write_buffer_size() if transport else 0)

    def _drop(self) -> None:
        self.gw.metrics.sse_dropped.labels("slow_client").inc()
        log.info("dropping a slow SSE client", extra={"run_id": self.run_id})
        transport = self.request.transport
        if transport is not None:
            transport.abort()  # wakes a writer blocked in drain(); memory is released
        raise SlowClient

    def _drop_if_slow(self) -> None:
        if self._pending() > self.limit:
            self._drop()

    def _push(self, data: bytes, count: int) -> None:
        self._drop_if_slow()
        self._chunks.append(data)
        self._queued += len(data)
        self._events += count
        self._wake()

    def _start_source(self) -> None:
        if self.head:
            self._push(self.head, 1)
        if self.ended:
            self.source_ended(None)
            return
        if self.source is not None:
            self._pump_task = asyncio.create_task(self.source(self))
            self._pump_task.add_done_callback(lambda _: self.source_ended(None))
            return
        feed = self.gw.feeds.subscribe(self.run_id, self, self.after, self.token)
        if feed is not None:
            self._feed = feed
            return
        self.gw.metrics.sse_upstream.inc()
        self._pump_task = asyncio.create_task(self._pump())
        self._pump_task.add_done_callback(self._pump_finished)

    def _pump_finished(self, task: asyncio.Task[None]) -> None:
        self.gw.metrics.sse_upstream.dec()
        if self._feed is None:  # not handed over to the run's feed: the source is done
            self.source_ended(None)

    def _hand_over(self, after: int) -> bool:
        """Once the dedicated stream has caught up to what the run's feed holds (or no feed is
        left), follow the feed instead: a far-behind resume costs its own upstream only while it
        catches up, not for the run's life. Synchronous: nothing arrives between the two."""
        if self._dropped or self._stopping:
            return False
        feed = self.gw.feeds.subscribe(self.run_id, self, after, self.token)
        if feed is None:
            return False
        self._feed = feed
        return True

    async def _pump(self) -> None:
        after = self.after
        stream = follow_events(self.gw.client, self.run_id, self.token, lambda: after)
        async with contextlib.aclosing(stream):
            async for events in stream:
                frames: list[bytes] = []
                end = False
                for ev in events:
                    kind = ev.WhichOneof("event")
                    if kind == "reset":
                        # The client redraws from this state; the log continues after it.
                        after = ev.reset.run.last_sequence
                        end = ev.reset.run.status in TERMINAL_STATUSES
                    elif ev.sequence <= after:
                        continue  # already sent on this connection
                    else:
                        after = ev.sequence
                        end = kind in TERMINAL_TYPES
                    frames.append(sse_frame(ev))
                    if end:
                        break
                if frames:
                    self._push(b"".join(frames), len(frames))
                if end or self._hand_over(after):
                    return

    # -- the client side --

    async def _write(self, data: bytes) -> None:
        # A write blocks only while the socket is full; one that stays blocked this long means
        # the client stopped reading, so the connection goes (the client resumes from its id).
        # asyncio.timeout, not wait_for: the write runs in this task (wait_for wraps it in a new
        # task, one more turn of the loop per write).
        stall_s = max(1.0, 2 * self.gw.settings.sse_heartbeat_s)
        try:
            async with asyncio.timeout(stall_s):
                await self.resp.write(data)
        except TimeoutError:
            self._drop()

    async def run(self) -> None:
        heartbeat_s = self.gw.settings.sse_heartbeat_s
        first = True
        try:
            await self._write(f"retry: {self.gw.settings.sse_retry_ms}\n\n".encode())
            self._watch_grant()
            if not self._reauthenticating:
                self._start_source()
            while not self.stopping() and not self._dropped:
                if not self._chunks and not self._source_done:
                    if not await self._sleep(heartbeat_s):
                        self._drop_if_slow()
                        await self._write(HEARTBEAT)
                        self.gw.metrics.sse_heartbeats.inc()
                        continue
                if self.stopping() or self._dropped:
                    break
                if self._chunks:
                    chunks = self._chunks
                    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    count, self._events = self._events, 0
                    self._chunks = []
                    self._queued = 0
                    await self._write(data)
                    self.gw.metrics.sse_events.inc(count)
                    if first:
                        first = False
                        self.gw.metrics.sse_first_event.observe(time.perf_counter() - self.started)
                elif self._source_done:
                    break
        except (ConnectionError, SlowClient):
            pass  # the client went away or was dropped; it reconnects with its Last-Event-ID
        finally:
            self._unwatch_grant()
            self._chunks = []
            if self._feed is not None:
                self._feed.leave(self)
            if self._pump_task is not None and not self._pump_task.done():
                self._pump_task.cancel()
        pump = self._pump_task
        if pump is None:
            return
        results = await asyncio.gather(pump, return_exceptions=True)
        err = results[0]
        if isinstance(err, grpc.aio.AioRpcError):
            log.warning("event stream ended by the runtime: %s", err.code().name)
        elif isinstance(err, Exception) and not isinstance(err, SlowClient):
            log.error("event stream failed", exc_info=err)


def _cap_send_buffer(request: web.Request, budget: int) -> None:
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return
    size = min(max(budget, _SNDBUF_MIN), _SNDBUF_MAX)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
    except OSError:
        log.debug("could not cap the SSE socket's send buffer")


async def stream_response(
    request: web.Request,
    gw: GatewayState,
    *,
    run_id: str,
    token: Credential,
    after: int,
    started: float,
    head: bytes = b"",
    ended: bool = False,
    status: int = 200,
    headers: dict[str, str] | None = None,
    slot: str | None = None,
    expires_at: float | None = None,
    jtis: tuple[str, ...] = (),
    source: Source | None = None,
) -> web.StreamResponse:
    """Serve the stream; `slot` (the caller's from gw.slots.acquire) is released when it ends;
    `expires_at` / `jtis`: the opening token's, which end it (stream_grants.py); `source`: what
    feeds a stream that is not a run's (EventStream)."""
    try:
        resp = web.StreamResponse(status=status, headers={**SSE_HEADERS, **(headers or {})})
        _cap_send_buffer(request, gw.settings.sse_buffer_bytes)
        await resp.prepare(request)
    except BaseException:
        await gw.slots.release(gw.redis, slot)
        raise
    stream = EventStream(
        gw,
        request,
        resp,
        run_id=run_id,
        token=token,
        after=after,
        started=started,
        head=head,
        ended=ended,
        expires_at=expires_at,
        jtis=jtis,
        source=source,
    )
    gw.streams.add(stream)
    gw.metrics.sse_open.inc()
    if after:
        gw.metrics.sse_replays.inc()
    try:
        await stream.run()
    finally:
        gw.streams.discard(stream)
        gw.metrics.sse_open.dec()
        await gw.slots.release(gw.redis, slot)
    return resp
