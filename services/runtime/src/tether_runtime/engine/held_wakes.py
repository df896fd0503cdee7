"""Waking a call that waits for a person's answer (held_questions.py) the moment it is given, on
whichever pod: the answer's transaction sends a NOTIFY on `store.runs.HELD_CHANNEL` with the
run's id (delivered on commit), the worker's LISTEN connection hears it and sets the waiting
call's event. Reading the card again stays the fallback, slow while LISTEN works."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

POLL_S = 0.2
"""How often a waiting call reads its card when there is nowhere to LISTEN (a transaction pooler
without TETHER_DB_LISTEN_URL); while LISTEN works, every TETHER_HELD_POLL_S (a notification lost
with a dropped LISTEN session is also covered by `wake_all`)."""


class HeldWakes:
    """The calls of this process waiting for an answer, by run id."""

    def __init__(self, fallback_s: float) -> None:
        self._fallback_s = fallback_s
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self.listening = False
        """Set by the worker while its LISTEN connection hears HELD_CHANNEL."""

    @property
    def fallback_s(self) -> float:
        return self._fallback_s if self.listening else POLL_S

    @contextmanager
    def waiting(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set when the run's held question may have been answered; registered before
        the caller first reads the card, so no answer falls between the read and the wait."""
        woken = asyncio.Event()
        self._waiting.setdefault(run_id, set()).add(woken)
        try:
            yield woken
        finally:
            found = self._waiting.get(run_id)
            if found is not None:
                found.discard(woken)
                if not found:
                    del self._waiting[run_id]

    def notified(self, run_id: str) -> None:
        for woken in self._waiting.get(run_id, ()):
            woken.set()

    def wake_all(self) -> None:
        """The LISTEN session ended: what it missed is found by reading every card again."""
        for found in self._waiting.values():
            for woken in found:
                woken.set()
