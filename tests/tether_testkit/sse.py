"""An SSE client for whole-system tests: reads a gateway's stream frame by frame, with arrival
times, so tests can check ids, event types, heartbeats and how the stream ended."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Frame:
    at: float
    kind: str  # "event", "comment" or "retry"
    id: str | None = None
    event: str = "message"
    data: str = ""
    text: str = ""

    @property
    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.data)
        return value


@dataclass
class SseReader:
    resp: aiohttp.ClientResponse
    frames: list[Frame] = field(default_factory=list)
    ended: bool = False
    _buf: str = ""

    async def next(self, timeout: float = 10) -> Frame | None:
        """The next frame, or None when the stream ended."""
        while True:
            frame = self._parse_one()
            if frame is not None:
                self.frames.append(frame)
                return frame
            if self.ended:
                return None
            chunk = await asyncio.wait_for(self.resp.content.readany(), timeout)
            if not chunk:
                self.ended = True
                continue
            self._buf += chunk.decode()

    def _parse_one(self) -> Frame | None:
        if "\n\n" not in self._buf:
            return None
        block, self._buf = self._buf.split("\n\n", 1)
        now = time.monotonic()
        if block.startswith(":"):
            return Frame(at=now, kind="comment", text=block[1:].strip())
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(":")
            fields[key] = value[1:] if value.startswith(" ") else value
        if "retry" in fields and "data" not in fields:
            return Frame(at=now, kind="retry", text=fields["retry"])
        return Frame(
            at=now,
            kind="event",
            id=fields.get("id"),
            event=fields.get("event", "message"),
            data=fields.get("data", ""),
        )

    async def events_until(self, *types: str, timeout: float = 30) -> list[Frame]:
        """Events up to and including the first of `types` (or the stream's end)."""
        out: list[Frame] = []
        deadline = time.monotonic() + timeout
        while True:
            frame = await self.next(max(0.1, deadline - time.monotonic()))
            if frame is None:
                return out
            if frame.kind != "event":
                continue
            out.append(frame)
            if frame.event in types:
                return out

    async def rest(self, timeout: float = 30) -> list[Frame]:
        return await self.events_until(timeout=timeout)
