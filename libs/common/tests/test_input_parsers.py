"""Properties of tether_common.input_parsers: whatever a client sends, each parser returns a value
in its bounds or raises its client error (InvalidArgument; Unauthenticated for a bearer token),
never anything else (issue #35: an OverflowError, RecursionError, ValueError or TypeError
escaping a parser was a 500). Each property's example count is explicit; all run in seconds."""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tether_common import input_parsers as ip
from tether_common.errors import InvalidArgument, Unauthenticated

PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# Text a client could send: any code point (lone surrogates included), digit runs past int()'s
# limit, and the shapes each parser expects, slightly wrong.
any_text = st.text(max_size=64)
long_digits = st.builds(
    lambda d, n, lead: lead + d * n,
    st.sampled_from("0123456789"),
    st.integers(4290, 4400),
    st.sampled_from(["", "0", "1", " ", "-"]),
)
numbers = st.one_of(
    st.integers().map(str),
    st.integers(0, 2**70).map(lambda n: f"{n:0>30}"),
    long_digits,
    st.from_regex(r"\s*[0-9０-９²٣+\-.e_x]{0,25}\s*", fullmatch=True),
    any_text,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


def nested(depth: int, opener: str) -> str:
    return opener * depth


# -- resume points --


@PROPERTY
@given(st.none() | numbers, st.none() | numbers)
@example("0" * 4301, None)  # issue #35 finding 2
@example(None, "1" + "0" * 4300)
def test_resume_point_is_a_bigint_or_invalid_argument(
    header: str | None, query: str | None
) -> None:
    try:
        value = ip.resume_point(header, query)
    except InvalidArgument:
        return
    assert 0 <= value <= ip.MAX_SEQUENCE


@settings(max_examples=100, deadline=None)
@given(st.integers(0, ip.MAX_SEQUENCE), st.integers(0, 5000))
def test_resume_point_reads_any_sequence_with_any_leading_zeros(seq: int, zeros: int) -> None:
    assert ip.resume_point("0" * zeros + str(seq), None) == seq
    assert ip.resume_point(None, f" {seq} ") == seq


@pytest.mark.parametrize("raw", ["0" * 4301, "0" * 100_000])
def test_resume_point_of_many_zeros_is_zero(raw: str) -> None:
    assert ip.resume_point(raw, None) == 0 == ip.resume_point(None, raw)


@pytest.mark.parametrize("raw", ["1" + "0" * 4300, "9" * 4301, str(2**63), "-0", "0x1", "²"])
def test_resume_point_refuses(raw: str) -> None:
    with pytest.raises(InvalidArgument):
        ip.resume_point(raw, None)


# -- page sizes --


@PROPERTY
@given(st.none() | numbers, st.integers(1, 10_000), st.integers(1, 10_000))
def test_page_size_is_within_bounds_or_invalid_argument(
    raw: str | None, default: int, maximum: int
) -> None:
    try:
        value = ip.page_size(raw, default=default, maximum=maximum)
    except InvalidArgument:
        return
    assert value == default if raw is None else 1 <= value <= maximum


@PROPERTY
@given(st.integers(-(2**31), 2**31 - 1), st.integers(1, 1000), st.integers(1, 1000))
def test_page_limit_is_within_bounds_or_invalid_argument(
    requested: int, default: int, maximum: int
) -> None:
    try:
        value = ip.page_limit(requested, default=default, maximum=maximum)
    except InvalidArgument:
        assert requested < 0
        return
    assert value == min(requested or default, maximum)


# -- page tokens --

tokens = st.one_of(
    any_text,
    st.binary(max_size=200).map(b64),
    json_values.map(lambda v: b64(json.dumps(v).encode())),
    st.dictionaries(st.sampled_from(["id", "t", "f", "x"]), json_values).map(
        lambda v: b64(json.dumps(v).encode())
    ),
    st.builds(lambda n, c: b64(nested(n, c).encode()), st.integers(0, 5000), st.sampled_from("[{")),
    st.builds(lambda n: b64(b'{"id": ' + b"9" * n + b', "f": "x"}'), st.integers(4290, 4400)),
)


@PROPERTY
@given(tokens, st.sampled_from(["", "x", "f" * 16]), st.sampled_from([("id",), ("t", "id")]))
@example(b64(b"[" * 1200), "x", ("id",))  # issue #35 finding 4
@example(b64(b"[" * 700), "x", ("id",))  # under the length bound: the depth is checked too
def test_page_token_is_a_position_or_invalid_argument(
    token: str, filters: str, fields: tuple[str, ...]
) -> None:
    try:
        position = ip.page_token(token, filters, fields)
    except InvalidArgument:
        return
    if position is None:
        assert token == ""
        return
    assert set(position) == set(fields) and all(isinstance(v, str) for v in position.values())


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=16))
def test_page_token_reads_what_it_encoded(run_id: str, at: str, filters: str) -> None:
    token = ip.encode_page_token({"t": at, "id": run_id}, filters)
    assert ip.page_token(token, filters, ("t", "id")) == {"t": at, "id": run_id}
    with pytest.raises(InvalidArgument):
        ip.page_token(token, filters + "-", ("t", "id"))


# -- times --

rfc3339_like = st.one_of(
    any_text,
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    st.builds(
        lambda y, h, m, sign: f"{y:04d}-01-01T00:00:00{sign}{h:02d}:{m:02d}",
        st.sampled_from([1, 2, 9998, 9999]),
        st.integers(0, 23),
        st.integers(0, 59),
        st.sampled_from("+-"),
    ),
    st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "2026-01-31"]),
)


@PROPERTY
@given(rfc3339_like)
@example("0001-01-01T00:00:00+14:00")  # issue #35 finding 3
@example("9999-12-31T23:59:59-14:00")
def test_rfc3339_is_a_utc_time_in_timestamps_range_or_invalid_argument(raw: str) -> None:
    try:
        when = ip.rfc3339(raw, "since")
    except InvalidArgument:
        return
    assert when.tzinfo is UTC
    Timestamp().FromDatetime(when)  # what the gateway does with it next: no OverflowError


@PROPERTY
@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1), st.booleans())
@example(2**40, 0, True)  # issue #35 finding 3, over gRPC
def test_timestamp_is_a_utc_time_or_invalid_argument(seconds: int, nanos: int, set_: bool) -> None:
    try:
        when = ip.timestamp(Timestamp(seconds=seconds, nanos=nanos), set_, "start_time")
    except InvalidArgument:
        assert set_
        return
    if not set_:
        assert when is None
        return
    assert when is not None and when.tzinfo is UTC
    assert datetime(1, 1, 1, tzinfo=UTC) <= when <= datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)


# -- idempotency keys --


@PROPERTY
@given(st.one_of(any_text, st.text(min_size=120, max_size=140)), st.booleans())
def test_idempotency_key_is_storable_and_short_or_invalid_argument(
    key: str, required: bool
) -> None:
    try:
        value = ip.idempotency_key(key, required=required)
    except InvalidArgument:
        return
    assert value == key and len(key) <= ip.MAX_IDEMPOTENCY_KEY and ip.storable(key)
    assert key or not required


# -- bearer tokens: header and time claims --

headers = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"alg": json_values | st.sampled_from(["RS256", "ES256", "none", "HS256"])},
        optional={"kid": json_values | st.text(max_size=8), "crit": json_values},
    ),
)
bearer_tokens = st.one_of(
    any_text,
    st.builds(
        lambda h, p, s: ".".join((b64(json.dumps(h).encode()), p, s)),
        headers,
        st.text("abcXYZ019-_", max_size=20),
        st.text("abcXYZ019-_=", max_size=20),
    ),
    st.builds(lambda n: b64(nested(n, "[").encode()) + ".e30.c2ln", st.integers(900, 3000)),
)


@PROPERTY
@given(bearer_tokens)
@example(b64(b'{"alg": ["RS256"]}') + ".e30.c2ln")  # issue #35 finding 1: an alg not a string
def test_token_header_is_strings_or_unauthenticated(token: str) -> None:
    try:
        header = ip.token_header(token)
    except Unauthenticated:
        return
    assert isinstance(header.alg, str) and isinstance(header.kid, str)


@PROPERTY
@given(
    st.dictionaries(
        st.sampled_from(["exp", "iat", "sub"]),
        json_values | st.integers(10**300, 10**400) | st.floats(),
    ),
    st.sampled_from(["exp", "iat"]),
)
@example({"exp": 10**400}, "exp")  # issue #35 finding 1: an exp past float's range
def test_claim_time_is_finite_or_unauthenticated(claims: dict[str, Any], name: str) -> None:
    try:
        seconds = ip.claim_time(claims, name)
    except Unauthenticated:
        return
    assert math.isfinite(seconds)


# -- JSON documents (request bodies, answers' fills) --

json_texts = st.one_of(
    any_text,
    json_values.map(json.dumps),
    st.builds(lambda n, c: nested(n, c), st.integers(0, 100_000), st.sampled_from("[{")),
    st.builds(lambda n: '{"a": ' + "7" * n + "}", st.integers(4290, 4400)),
    st.sampled_from(["NaN", "[Infinity]", '{"a": -Infinity}', "1e999", "[-1e400]", " "]),
)


@PROPERTY
@given(json_texts)
@example("[" * 100_000)
@example('{"a": ' + "7" * 5000 + "}")
def test_json_document_is_finite_shallow_json_or_invalid_argument(raw: str) -> None:
    try:
        value = ip.json_document(raw, "the answer")
    except InvalidArgument:
        return
    assert ip.json_depth(value) <= ip.MAX_JSON_DEPTH
    json.dumps(value, allow_nan=False)  # what the gateway and the store do with it next
