"""An open SSE stream lasts only as long as the authorisation that opened it: when its token
expires or is revoked, the stream gets one `reauthenticate` frame and ends (the client gets a new
token or session and resumes from its Last-Event-ID). Kept small for thousands of idle streams:
one timer per distinct expiry, shared by every stream whose token expires then (the streams of
one token, or of tokens minted in the same second: a timer handle costs ~0.5 KiB, a set entry a
few dozen bytes; no task), and an index by `jti` for revocations."""

from __future__ import annotations

import asyncio
import time
from typing import Literal, Protocol

Reason = Literal["expired", "revoked"]


def reauthenticate_frame(reason: Reason) -> bytes:
    # No `id:` line: the client's Last-Event-ID stays the last event it got.
    return (
        f'event: reauthenticate\ndata: {{"type":"reauthenticate","reason":"{reason}"}}\n\n'.encode()
    )


class Ending(Protocol):
    def reauthenticate(self, reason: Reason) -> None:
        """Send the frame after what is queued, and end."""


class StreamGrants:
    """This pod's open streams by the token they hold."""

    def __init__(self, leeway_s: float) -> None:
        # Tokens are accepted up to `leeway_s` past their expiry (clock skew between pods), so
        # a stream ends then too: ending it earlier would have its client reconnect with the
        # same, still accepted, token again and again.
        self.leeway_s = leeway_s
        self._by_jti: dict[str, set[Ending]] = {}
        self._by_deadline: dict[float, set[Ending]] = {}
        self._timers: dict[float, asyncio.TimerHandle] = {}

    def watch(self, stream: Ending, jtis: tuple[str, ...], expires_at: float) -> None:
        """Track `stream` until `forget`; it ends at its token's expiry (plus the leeway)."""
        for jti in jtis:
            self._by_jti.setdefault(jti, set()).add(stream)
        deadline = expires_at + self.leeway_s
        streams = self._by_deadline.get(deadline)
        if streams is None:
            streams = self._by_deadline[deadline] = set()
            delay = max(0.0, deadline - time.time())
            self._timers[deadline] = asyncio.get_running_loop().call_later(
                delay, self._expired, deadline
            )
        streams.add(stream)

    def _expired(self, deadline: float) -> None:
        self._timers.pop(deadline, None)
        for stream in list(self._by_deadline.pop(deadline, ())):
            stream.reauthenticate("expired")

    def forget(self, stream: Ending, jtis: tuple[str, ...], expires_at: float | None) -> None:
        for jti in jtis:
            streams = self._by_jti.get(jti)
            if streams is None:
                continue
            streams.discard(stream)
            if not streams:
                del self._by_jti[jti]
        if expires_at is None:
            return
        deadline = expires_at + self.leeway_s
        waiting = self._by_deadline.get(deadline)
        if waiting is None:
            return
        waiting.discard(stream)
        if not waiting:  # the last stream of this expiry: its timer goes too
            del self._by_deadline[deadline]
            timer = self._timers.pop(deadline, None)
            if timer is not None:
                timer.cancel()

    def timers(self) -> int:
        """Timers this pod holds for expiries (one per distinct expiry of an open stream)."""
        return len(self._timers)

    def revoked(self, jti: str) -> None:
        """Every stream this pod holds with `jti` ends now (a Revocations listener)."""
        for stream in list(self._by_jti.pop(jti, ())):
            stream.reauthenticate("revoked")

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_jti.values())
