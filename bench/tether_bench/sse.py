"""A minimal, fast SSE reader over an aiohttp response: splits frames on blank lines, stamps each
event with its arrival time (wall clock, to compare with the event's commit `time`, and a monotonic
clock for client-side intervals), and counts comment heartbeats."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from tether_proto import wire

TERMINAL = wire.TERMINAL_EVENT_TYPES


@dataclass
class Event:
    id: str
    type: str
    data: str
    wall: float  # time.time() at arrival
    mono: float  # time.perf_counter() at arrival
    _json: dict[str, Any] | None = None

    def json(self) -> dict[str, Any]:
        if self._json is None:
            self._json = json.loads(self.data)
        return self._json


@dataclass
class Reader:
    """Reads one SSE response to its end (or until `stop` returns True for an event)."""

    resp: aiohttp.ClientResponse
    on_event: Callable[[Event], bool] | None = None  # return True to stop reading
    events: list[Event] = field(default_factory=list)
    heartbeats: int = 0
    retry_hints: int = 0
    keep: bool = True  # keep every event in `events`
    # Store chunks with their arrival times and parse after the stream ends (the server closes it
    # after a terminal event): the load generator's CPU per event stays off the measured window.
    lazy: bool = False
    count: int = 0
    last: Event | None = None
    ended_by_terminal: bool = False

    async def read(self) -> None:
        if self.lazy:
            await self._read_then_parse()
            return
        buf = b""
        async for chunk in self.resp.content.iter_any():
            buf, stop = self._feed(buf, chunk, time.time(), time.perf_counter())
            if stop:
                return

    async def _read_then_parse(self) -> None:
        chunks: list[tuple[bytes, float, float]] = []
        async for chunk in self.resp.content.iter_any():
            chunks.append((chunk, time.time(), time.perf_counter()))
        buf = b""
        for chunk, wall, mono in chunks:
            buf, stop = self._feed(buf, chunk, wall, mono)
            if stop:
                return

    def _feed(self, buf: bytes, chunk: bytes, wall: float, mono: float) -> tuple[bytes, bool]:
        """Add a chunk; every frame it completes is stamped with its arrival. Returns the
        unfinished rest and whether reading should stop."""
        buf += chunk
        if b"\n\n" not in buf:
            return buf, False
        *frames, buf = buf.split(b"\n\n")
        for frame in frames:
            if self._frame(frame, wall, mono):
                return buf, True
        return buf, False

    def _frame(self, frame: bytes, wall: float, mono: float) -> bool:
        ev_id = ev_type = ""
        data: list[str] = []
        for raw in frame.split(b"\n"):
            line = raw.decode()
            if not line:
                continue
            if line.startswith(":"):
                self.heartbeats += 1
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                ev_id = value
            elif name == "event":
                ev_type = value
            elif name == "data":
                data.append(value)
            elif name == "retry":
                self.retry_hints += 1
        if not data:
            return False
        event = Event(ev_id, ev_type or "message", "\n".join(data), wall, mono)
        self.count += 1
        self.last = event
        if self.keep:
            self.events.append(event)
        if event.type in TERMINAL:
            self.ended_by_terminal = True
        if self.on_event is not None and self.on_event(event):
            return True
        return event.type in TERMINAL


_EPOCH_CACHE: dict[str, float] = {}


def parse_time(stamp: str) -> float:
    """RFC 3339 `2025-01-02T03:04:05.123456789Z` (0, 3, 6 or 9 fraction digits) -> epoch seconds."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = _EPOCH_CACHE.get(head)
    if base is None:
        base = datetime.fromisoformat(head).replace(tzinfo=UTC).timestamp()
        if len(_EPOCH_CACHE) > 100_000:
            _EPOCH_CACHE.clear()
        _EPOCH_CACHE[head] = base
    return base + (int(frac) / 10 ** len(frac) if frac else 0.0)
