"""Bounded parsers for what a client sends, shared by the gateway and the runtime: resume points,
page sizes, page tokens, times, idempotency keys, JSON documents and a bearer token's header and
time claims.

Each returns a value or raises the client error of its kind, `InvalidArgument` (400 /
INVALID_ARGUMENT), or `Unauthenticated` (401 / UNAUTHENTICATED) for a bearer token, and never
anything else: an `int()` past Python's digit limit, a time past year 9999 in UTC, a JSON text
nested past the recursion limit or a header field of the wrong type is the client's mistake, not
a 500. Anything else escaping a handler stays a 500 (and is counted): these parsers bound their
input, they do not catch errors in general."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from google.protobuf.timestamp_pb2 import Timestamp

from tether_common.errors import InvalidArgument, Unauthenticated

CLIENT_ERRORS = (InvalidArgument, Unauthenticated)

MAX_SEQUENCE = 2**63 - 1  # an event's sequence is a Postgres bigint
_MAX_SEQUENCE_DIGITS = len(str(MAX_SEQUENCE))  # 19, not counting leading zeros
_MAX_PAGE_SIZE_DIGITS = 6
# An idempotency key: 1-128 characters of any text Postgres and protobuf can hold (no NUL, valid
# UTF-8), the same limit at the gateway (the JSON body) and at the runtime (gRPC).
MAX_IDEMPOTENCY_KEY = 128
# The tokens this API issues are about 150 characters; anything much longer is not one of them.
MAX_PAGE_TOKEN_CHARS = 1024
# A bearer token: an IdP's with many claims is a few KiB; HTTP and gRPC headers stop at 8-16 KiB.
MAX_BEARER_CHARS = 16 * 1024
# Timestamp's range (google/protobuf/timestamp.proto): 0001-01-01T00:00:00Z to
# 9999-12-31T23:59:59.999999999Z, the range of Python's datetime in UTC too.
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799


def storable(value: str) -> bool:
    """Postgres text holds no NUL, and protobuf strings must be valid UTF-8 (no lone surrogates,
    which JSON's `\\udXXX` escapes can produce): either would surface as a 500 further down."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MAX_JSON_DEPTH = 64


def json_document(raw: str | bytes, name: str) -> object:
    """A JSON text (a request body, an answer's fill): nested at most MAX_JSON_DEPTH levels, no
    NaN or Infinity (which JSON does not have), no number past float's range or int()'s digit
    limit; `name` says what it is in the error."""

    def no_constant(constant: str) -> object:
        # Python's parser takes NaN and Infinity; json.dumps with allow_nan=False, re-encoding a
        # form's fill, and Postgres' jsonb refuse them (a 500 before).
        raise InvalidArgument(f"{name} is not valid JSON ({constant})")

    def finite_float(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):  # 1e999 parses as inf
            raise InvalidArgument(f"{name} holds a number out of range")
        return value

    try:
        parsed = json.loads(raw, parse_constant=no_constant, parse_float=finite_float)
    except ValueError as err:  # UnicodeDecodeError, and an int of more than 4300 digits, too
        raise InvalidArgument(f"{name} is not valid JSON") from err
    except RecursionError as err:  # e.g. 60,000 `[`: deeper than the parser's own stack
        raise InvalidArgument(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels") from err
    if json_depth(parsed) > MAX_JSON_DEPTH:
        raise InvalidArgument(f"{name} is nested deeper than {MAX_JSON_DEPTH} levels")
    return parsed


def json_depth(value: object) -> int:
    """How deeply arrays and objects nest in `value` (a scalar is 0), without recursion: a
    recursive walk of a deep document is itself the RecursionError this limit exists to stop.
    Stops counting once past MAX_JSON_DEPTH."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _decimal(raw: str, max_digits: int) -> int | None:
    """A non-negative decimal of at most `max_digits` ASCII digits, else None. isascii:
    str.isdigit() also accepts "²" or "٣", which int() refuses; the length: int() refuses more
    than 4300 digits (and a bound is cheaper to check than to convert)."""
    if not (raw.isascii() and raw.isdigit() and len(raw) <= max_digits):
        return None
    return int(raw)


def resume_point(last_event_id: str | None, after: str | None) -> int:
    """The sequence an event stream resumes after: `Last-Event-ID` first, then `?after=`, else 0."""
    raw = last_event_id if last_event_id and last_event_id.strip() else after
    if raw is None or not raw.strip():
        return 0
    raw = raw.strip()
    # Leading zeros are still the number (e.g. 4,301 of them are 0), however many there are.
    value = _decimal(raw.lstrip("0") or "0", _MAX_SEQUENCE_DIGITS)
    if value is None or value > MAX_SEQUENCE:
        raise InvalidArgument("Last-Event-ID / after must be a non-negative integer")
    return value


def page_size(raw: str | None, *, default: int, maximum: int) -> int:
    """A `pageSize` query parameter: 1 to `maximum`, `default` when left out."""
    if raw is None:
        return default
    value = _decimal(raw, _MAX_PAGE_SIZE_DIGITS)
    if value is None or not 1 <= value <= maximum:
        raise InvalidArgument(f"pageSize must be a number from 1 to {maximum}")
    return value


def page_limit(requested: int, *, default: int, maximum: int) -> int:
    """A gRPC `page_size` (AIP-158): 0 is the default, more than `maximum` is `maximum`."""
    if requested < 0:
        raise InvalidArgument("page_size must not be negative")
    return min(requested or default, maximum)


def encode_page_token(position: Mapping[str, str], filters: str) -> str:
    """An opaque page token (AIP-158): where the next page starts, bound to the filters'
    fingerprint that `page_token` checks."""
    raw = json.dumps({**position, "f": filters}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_token(token: str, filters: str, fields: tuple[str, ...]) -> dict[str, str] | None:
    """The position (`fields`, each a string) of a token `encode_page_token` made for the same
    filters; None for "" (the first page)."""
    if not token:
        return None
    if len(token) > MAX_PAGE_TOKEN_CHARS:
        raise InvalidArgument("page_token is not one this API issued")
    try:
        data: Any = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, RecursionError) as err:
        raise InvalidArgument("page_token is not one this API issued") from err
    if not isinstance(data, dict):
        raise InvalidArgument("page_token is not one this API issued")
    position = {name: data.get(name) for name in fields}
    if not all(isinstance(v, str) for v in position.values()) or "f" not in data:
        raise InvalidArgument("page_token is not one this API issued")
    if data["f"] != filters:
        raise InvalidArgument("page_token was issued for other filters (AIP-158)")
    return {name: str(value) for name, value in position.items()}


def rfc3339(raw: str, name: str) -> datetime:
    """An RFC 3339 time with its offset (e.g. `2026-01-31T00:00:00Z`), as an aware datetime in
    UTC within Timestamp's range (year 1 to 9999 in UTC, whatever the offset)."""
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"{name} must be an RFC 3339 time, e.g. 2026-01-31T00:00:00Z"
        ) from None
    if when.tzinfo is None:
        raise InvalidArgument(f"{name} needs a time zone (e.g. Z)")
    try:
        # 0001-01-01T00:00:00+14:00 is in year 0 in UTC; 9999-12-31T23:59:59-14:00 in 10000.
        return when.astimezone(UTC)
    except OverflowError:
        raise InvalidArgument(f"{name} is out of range (years 1 to 9999 in UTC)") from None


def timestamp(ts: Timestamp, present: bool, name: str) -> datetime | None:
    """A gRPC Timestamp field as an aware datetime in UTC (None when not set), refused outside
    the range timestamp.proto allows."""
    if not present:
        return None
    if not (_MIN_SECONDS <= ts.seconds <= _MAX_SECONDS and 0 <= ts.nanos <= 999_999_999):
        raise InvalidArgument(f"{name} is out of range (years 1 to 9999 in UTC)")
    return ts.ToDatetime(tzinfo=UTC)


def idempotency_key(key: str, *, required: bool) -> str:
    """An idempotency key: up to MAX_IDEMPOTENCY_KEY characters, storable; "" only when not
    `required` (no key: nothing is replayed)."""
    if required and not key:
        raise InvalidArgument(f"idempotency_key is required (1-{MAX_IDEMPOTENCY_KEY} characters)")
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidArgument(f"idempotency_key is longer than {MAX_IDEMPOTENCY_KEY} characters")
    if not storable(key):
        raise InvalidArgument("idempotency_key holds a character that cannot be stored")
    return key


@dataclass(frozen=True)
class TokenHeader:
    alg: str
    kid: str  # "" when the header names no key


def token_header(token: str) -> TokenHeader:
    """A bearer token's JOSE header, unverified: `alg` a string, `kid` a string if present."""
    if len(token) > MAX_BEARER_CHARS:
        raise Unauthenticated("invalid token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as err:
        raise Unauthenticated("invalid token") from err
    alg, kid = header.get("alg"), header.get("kid", "")
    if not isinstance(alg, str) or not isinstance(kid, str):
        raise Unauthenticated("invalid token")
    return TokenHeader(alg, kid)


def claim_time(claims: Mapping[str, Any], name: str) -> float:
    """A NumericDate claim (`exp`, `iat`, `nbf`: seconds since the epoch) as a finite float."""
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unauthenticated("invalid token")
    try:
        seconds = float(value)  # an int of 400 digits is past float's range
    except OverflowError:
        raise Unauthenticated("invalid token") from None
    if not math.isfinite(seconds):
        raise Unauthenticated("invalid token")
    return seconds
