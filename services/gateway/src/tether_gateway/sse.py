"""SSE (DESIGN section 6): each connection follows one source, its run's feed (run_feed.py: the
run's shared StreamRunEvents call, or a dedicated one while a far-behind resume catches up);
`retry:` first, pre-encoded frames written coalesced, heartbeats when idle, a bounded
per-connection buffer, drain on exit; a `reauthenticate` frame and the end when the token that
opened it expires or is revoked.

The one SSE writer of the gateway: a stream that is not a run's (the approvals inbox) brings its
own `source` (run as a SourceTask, a source like a feed) and gets the same writer, disconnect
handling and stream-slot release."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import grpc
from aiohttp import web
from tether.runtime.v1 import resources_pb2

from tether_gateway.run_feed import TERMINAL_STATUSES
from tether_gateway.runtime_client import Credential
from tether_gateway.state import GatewayState
from tether_gateway.stream_grants import Reason, reauthenticate_frame

log = logging.getLogger(__name__)

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}
HEARTBEAT = b": keep-alive\n\n"
# For clients that turn any block without an event into an empty event (the LangGraph JS SDK's
# decoder dispatches a blank line after a comment or a lone `retry:`, with the previous id): the
# heartbeat and `retry:` as lines that join the next event's block instead of blocks of their own.
HEARTBEAT_LINE = b": keep-alive\n"
# The kernel's send buffer counts against a connection's budget too: without a cap, Linux grows
# it to megabytes for a client that never reads (tcp_wmem), and that memory is the gateway's.
_SNDBUF_MIN, _SNDBUF_MAX = 4096, 256 * 1024


# Feeds a stream that is not a run's: offers it frames until it returns (EventStream.source).
Source = Callable[["EventStream"], Coroutine[Any, Any, None]]


class Feed(Protocol):
    """What a connection follows: a run's feed (run_feed.RunFeed) or a SourceTask. It offers
    the connection frames and ends it (`source_ended`) until the connection leaves it."""

    def leave(self, sub: EventStream) -> None: ...


class SourceTask:
    """A stream's own `source` coroutine as a feed: leaving it cancels it; its end ends the stream."""

    def __init__(self, stream: EventStream, source: Source) -> None:
        self.task = asyncio.create_task(source(stream))
        self.task.add_done_callback(lambda task: self._done(task, stream))
        stream.joined(self)

    def leave(self, sub: EventStream) -> None:
        self.task.cancel()

    @staticmethod
    def _done(task: asyncio.Task[None], stream: EventStream) -> None:
        err = None if task.cancelled() else task.exception()
        if isinstance(err, grpc.aio.AioRpcError):
            log.warning("event stream ended by the runtime: %s", err.code().name)
        elif err is not None:
            log.error("event stream failed", exc_info=err)
        stream.source_ended(None)


class SlowClient(Exception):
    """The client stopped reading and its queued bytes passed the per-connection limit."""


def is_finished(run: resources_pb2.Run, after: int) -> bool:
    """A reconnect to a finished run that has nothing left to send: answered 204."""
    return run.status in TERMINAL_STATUSES and after == run.last_sequence


class EventStream:
    """One SSE connection, fed by its run's feed (run_feed.py: the shared one, or a dedicated
    one until a resume point older than the shared ring has caught up). A resume point ahead
    of the run gets `head` (a `reset` built from the caller's GetRun) first and then follows the
    feed from the run's real position; `ended`: nothing follows. `source`, for a stream that is
    not a run's: a coroutine that feeds it (`offer`) and ends it by returning; it should stop
    once `client_gone()` (the writer notices only at its next write, a heartbeat at most)."""

    # Thousands of idle streams: no per-instance dict.
    __slots__ = (
        "gw",
        "request",
        "resp",
        "run_id",
        "token",
        "after",
        "started",
        "head",
        "ended",
        "expires_at",
        "jtis",
        "source",
        "heartbeat",
        "retry_end",
        "limit",
        "_chunks",
        "_queued",
        "_events",
        "_waiter",
        "_stopping",
        "_dropped",
        "_source_done",
        "_feed",
        "_reauthenticating",
        "_writing",
        "deadline",
        "deadline_slot",
        "slot",
        "_written",
    )

    def __init__(
        self,
        gw: GatewayState,
        request: web.Request,
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
        bare_lines: bool = False,
    ) -> None:
        self.gw = gw
        self.request = request
        self.resp = SseResponse(status=status, headers={**SSE_HEADERS, **(headers or {})})
        self.slot = slot
        self.run_id = run_id
        self.token = token
        self.after = after
        self.started = started
        self.head = head
        self.ended = ended
        self.expires_at = expires_at
        self.jtis = jtis
        self.source = source
        self.heartbeat = HEARTBEAT_LINE if bare_lines else HEARTBEAT
        self.retry_end = b"" if bare_lines else b"\n"  # the blank line that ends its block
        self.limit = gw.settings.sse_buffer_bytes
        self._chunks: list[bytes] = []
        self._queued = 0
        self._events = 0
        self._waiter: asyncio.Future[bool] | None = None  # set while serve() sleeps
        self._stopping = False
        self._dropped = False
        self._source_done = False
        self._feed: Feed | None = None
        self._reauthenticating = False
        self._writing = False
        self._written = False  # an event was written (the first one is timed)
        self.deadline = 0.0  # stream_deadlines.Deadlines' bookkeeping
        self.deadline_slot: int | None = None

    def stop(self) -> None:
        """End the stream (the gateway drains): it sends nothing more, so it leaves its feed now."""
        self._stopping = True
        self._leave()
        self._wake()

    def stopping(self) -> bool:
        return self._stopping

    def client_gone(self) -> bool:
        """The client closed the connection: aiohttp drops a request's transport when it does."""
        transport = self.request.transport
        return transport is None or transport.is_closing()

    # An idle connection holds one future while it sleeps (no Event, no wait_for task, no timer:
    # the process's one timer wakes it for its heartbeat, stream_deadlines.py): thousands of
    # them wait on one run.

    def _wake(self, woken: bool = True) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(woken)

    def expired(self) -> None:
        """Its deadline came (stream_deadlines.Timed): a write that blocked this long means the
        client stopped reading, so the connection goes (the client resumes from its id); a
        sleep this long is due a heartbeat."""
        if self._writing:
            self._dropped = True
            self._abort_slow()  # the blocked write raises ConnectionError
        else:
            self._wake(False)

    def _sleep(self) -> asyncio.Future[bool]:
        """What serve() awaits for frames, the source's end or stop(): the future resolves to False
        when a heartbeat is due first. A plain method, not a coroutine: an idle stream keeps no
        frame of its own for it (thousands idle)."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self.gw.deadlines.at(self, loop.time() + self.gw.settings.sse_heartbeat_s)
        return waiter

    # -- the source side: a feed calls joined, then offer until source_ended --

    def joined(self, feed: Feed) -> None:
        self._feed = feed

    def _leave(self) -> None:
        feed, self._feed = self._feed, None
        if feed is not None:
            feed.leave(self)

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
        self._leave()
        frame = reauthenticate_frame(reason)
        self._chunks.append(frame)
        self._queued += len(frame)
        self._source_done = True
        self._wake()
        self.gw.metrics.sse_reauthenticate.labels(reason).inc()

    def _watch_grant(self) -> None:
        if self.expires_at is None:
            return
        self.gw.grants.watch(self, self.jtis, self.expires_at)
        # Revoked between the request's check and now (the open awaited the runtime meanwhile).
        if any(self.gw.auth.revocations.is_revoked(j) for j in self.jtis):
            self.reauthenticate("revoked")

    def _unwatch_grant(self) -> None:
        self.gw.grants.forget(self, self.jtis, self.expires_at)

    def _pending(self) -> int:
        transport = self.request.transport
        return self._queued + (transport.get_write_buffer_size() if transport else 0)

    def _drop(self) -> None:
        self._abort_slow()
        raise SlowClient

    def _abort_slow(self) -> None:
        self.gw.metrics.sse_dropped.labels("slow_client").inc()
        log.info("dropping a slow SSE client", extra={"run_id": self.run_id})
        transport = self.request.transport
        if transport is not None:
            transport.abort()  # wakes a writer blocked in drain(); memory is released

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
        elif self.source is not None:
            SourceTask(self, self.source)
        else:
            self.gw.feeds.subscribe(self.run_id, self, self.after, self.token)

    # -- the client side --

    async def _write(self, data: bytes, *, last: bool = False) -> None:
        # A write blocks only while the socket is full; one that stays blocked past its deadline
        # (`expired`) means the client stopped reading. The deadline is the process's one timer
        # (stream_deadlines.py), not an asyncio.timeout per write: a timer armed and cancelled
        # per write, for writes that almost never block. `last`: the stream's final frames,
        # written with the chunked body's end (one write, not two).
        stall_s = max(1.0, 2 * self.gw.settings.sse_heartbeat_s)
        self.gw.deadlines.at(self, asyncio.get_running_loop().time() + stall_s)
        self._writing = True
        try:
            await (self.resp.write_eof(data) if last else self.resp.write(data))
        finally:
            self._writing = False

    async def serve(self) -> web.StreamResponse:
        """The stream from its headers to its end, its slot released then (sse.stream_response
        hands this coroutine on). An idle stream sleeps here, in this one frame: the writes are
        helpers awaited only while they write."""
        gw, request = self.gw, self.request
        try:
            _cap_send_buffer(request, gw.settings.sse_buffer_bytes)
            await self.resp.prepare(request)
            _drop_keepalive_timer(request)
        except BaseException:
            await gw.slots.release(gw.redis, self.slot)
            raise
        gw.streams.add(self)
        gw.metrics.sse_open.inc()
        if self.after:
            gw.metrics.sse_replays.inc()
        try:
            # The source starts before anything is written, so that what it has at hand (a
            # feed's ring, a `reset` head, a started run's first events) leaves in the first
            # write, with the response's headers (SseResponse) and the `retry:` line.
            self._watch_grant()
            if not self._reauthenticating:
                self._start_source()
            retry = f"retry: {gw.settings.sse_retry_ms}\n".encode() + self.retry_end
            self._chunks.insert(0, retry)
            self._queued += len(retry)
            while not self.stopping() and not self._dropped:
                if not self._chunks and not self._source_done:
                    woken = await self._sleep()
                    self._waiter = None
                    if not woken:
                        await self._heartbeat()
                        continue
                if self.stopping() or self._dropped or not self._chunks:
                    break  # stopped, dropped, or the source ended with nothing left to send
                if await self._write_queued():
                    break
        except (ConnectionError, SlowClient):
            pass  # the client went away or was dropped; it reconnects with its Last-Event-ID
        finally:
            gw.deadlines.forget(self)
            self._unwatch_grant()
            self._chunks = []
            self._leave()
            gw.streams.discard(self)
            gw.metrics.sse_open.dec()
            await gw.slots.release(gw.redis, self.slot)
        return self.resp

    async def _heartbeat(self) -> None:
        self._drop_if_slow()
        await self._write(self.heartbeat)
        self.gw.metrics.sse_heartbeats.inc()

    async def _write_queued(self) -> bool:
        """Write what is queued in one write; True when it was the stream's last."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        count, self._events = self._events, 0
        self._chunks = []
        self._queued = 0
        last = self._source_done  # nothing is queued after the source's end
        await self._write(data, last=last)
        if count:
            metrics = self.gw.metrics
            metrics.sse_events.inc(count)
            if not self._written:
                self._written = True
                metrics.sse_first_event.observe(time.perf_counter() - self.started)
        return last


class SseResponse(web.StreamResponse):
    """A StreamResponse whose headers wait for its first write, as aiohttp's own Response's do
    (`_send_headers_immediately`, aiohttp's switch for it): EventStream.serve writes the headers,
    the `retry:` line and the frames ready at the stream's start as one write, not three."""

    _send_headers_immediately = False


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


def _drop_keepalive_timer(request: web.Request) -> None:
    """aiohttp arms a keep-alive timer when a connection opens (against one that never sends a
    request); while a handler runs it does nothing when it fires, and it is re-armed after the
    response if the connection stays open. A stream can last hours: cancel it now (~0.5 KiB
    per idle stream). `keep_alive(True)` leaves the mode as it is during a handler (aiohttp
    sets it from the response when the handler returns) and cancels the timer."""
    protocol = request.protocol
    if protocol is not None:
        protocol.keep_alive(True)


def stream_response(
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
    bare_lines: bool = False,
) -> Coroutine[Any, Any, web.StreamResponse]:
    """Serve the stream (await the result); `slot` (the caller's from gw.slots.acquire) is
    released when it ends; `expires_at` / `jtis`: the opening token's, which end it
    (stream_grants.py); `source`: what feeds a stream that is not a run's (EventStream);
    `bare_lines`: heartbeats and `retry:` as lines of the next block (HEARTBEAT_LINE). A plain
    function handing on the stream's own coroutine (EventStream.serve), as the pass-through
    middlewares hand on the handler's: an idle stream keeps no frame of it."""
    stream = EventStream(
        gw,
        request,
        run_id=run_id,
        token=token,
        after=after,
        started=started,
        head=head,
        ended=ended,
        status=status,
        headers=headers,
        slot=slot,
        expires_at=expires_at,
        jtis=jtis,
        source=source,
        bare_lines=bare_lines,
    )
    return stream.serve()
