"""Prefixed, time-sortable identifiers (`run_…`, `conv_…`): the prefix names the kind at a glance."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """A ULID-style id: 48 bits of milliseconds then 80 random bits, so ids sort by creation."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_encode(millis, 10)}{_encode(rand, 16)}"


def new_id_after(prefix: str, earlier: str) -> str:
    """A new id that sorts after `earlier` (an id of this shape), even when both fall in the same
    millisecond or the clock stepped back in between."""
    body = earlier.partition("_")[2]
    candidate = new_id(prefix)
    if candidate.partition("_")[2] > body:
        return candidate
    value = 0
    for ch in body:
        value = value * 32 + _ALPHABET.index(ch)
    return f"{prefix}_{_encode(value + 1 + int.from_bytes(os.urandom(4), 'big'), 26)}"


PREFIXES = ("conv", "msg", "run", "int", "call", "op")


def has_prefix(value: str, prefix: str) -> bool:
    return value.startswith(prefix + "_") and 8 < len(value) <= 64
