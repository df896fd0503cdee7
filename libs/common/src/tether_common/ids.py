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


def made_lately(value: str, prefix: str, within_s: float) -> bool:
    """Whether `value` has new_id's shape for `prefix` and a time part within `within_s` of now:
    an id a caller made for a new row, as new_id makes them (ids sort by creation, so one from
    far in the past or the future would sort among other rows)."""
    head, sep, body = value.partition("_")
    if head != prefix or not sep or len(body) != 26 or not set(body) <= _DIGITS:
        return False
    millis = 0
    for ch in body[:10]:
        millis = millis * 32 + _ALPHABET.index(ch)
    return abs(millis / 1000 - time.time()) <= within_s


_DIGITS = frozenset(_ALPHABET)
PREFIXES = ("conv", "msg", "run", "int", "call", "op")


def has_prefix(value: str, prefix: str) -> bool:
    return value.startswith(prefix + "_") and 8 < len(value) <= 64
