"""How a run leaves its worker's loop, other than by losing the lease."""

from __future__ import annotations


class Paused(Exception):
    """The run is waiting for a person; the worker lets it go."""


class Finished(Exception):
    """The run reached a terminal state."""


class RunFailure(Exception):
    """The run cannot go on: it fails with `code` and a message for a person."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
