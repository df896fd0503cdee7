"""Continuing an answer the user has partly seen (`ModelRequest.continue_from`): only new text
may reach the user, joined to the old exactly."""

from __future__ import annotations

_PROBE = 64
"""Characters held back before deciding whether the model restarted instead of continuing."""

_MIN_OVERLAP = 16
"""Shortest repeated tail taken as a repeat rather than a coincidence."""


class RepeatFilter:
    """For a provider that cannot prefill the answer (OpenAI chat completions): the model is
    asked to continue, but may start over or repeat the last words. The first characters are
    held back until it is clear; a full restart, or a repeat of at least 16 characters of the
    seen text's end, is dropped. Without `seen` it passes text straight through."""

    def __init__(self, seen: str) -> None:
        self._seen = seen
        self._held = ""
        self._deciding = bool(seen)

    def feed(self, piece: str) -> str:
        if not self._deciding:
            return piece
        self._held += piece
        return self._decide(final=False)

    def flush(self) -> str:
        """The text still held at the end of the stream."""
        if not self._deciding:
            return ""
        return self._decide(final=True)

    def _decide(self, *, final: bool) -> str:
        seen, held = self._seen, self._held
        if held.startswith(seen):
            return self._release(held[len(seen) :])
        if seen.startswith(held) and not final:
            return ""  # possibly a restart from the top: wait
        if len(held) < _PROBE and not final:
            return ""
        overlap = next(
            (
                k
                for k in range(min(len(held), len(seen)), _MIN_OVERLAP - 1, -1)
                if seen.endswith(held[:k])
            ),
            0,
        )
        if final and seen.startswith(held):
            overlap = len(held)  # the stream ended inside a restart: nothing new
        return self._release(held[overlap:])

    def _release(self, text: str) -> str:
        self._deciding = False
        self._held = ""
        return text


def split_prefill(seen: str) -> tuple[str, str]:
    """(prefill, stripped): Anthropic refuses a final assistant message ending in whitespace,
    so the prefill is `seen` without its trailing whitespace, which the model then writes
    again at the start of its continuation."""
    prefill = seen.rstrip()
    return prefill, seen[len(prefill) :]


class LeadingSpaceTrim:
    """Drops from the continuation the whitespace the prefill lost (at most as many characters
    as were stripped, and only whitespace), so seen + continuation reads as one text."""

    def __init__(self, stripped: str) -> None:
        self._left = len(stripped)

    def feed(self, piece: str) -> str:
        while self._left and piece:
            if not piece[0].isspace():
                self._left = 0
                break
            piece = piece[1:]
            self._left -= 1
        return piece
