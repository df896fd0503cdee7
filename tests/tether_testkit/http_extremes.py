"""Hypothesis strategies for what schemathesis leaves alone: the headers the gateway reads
(Authorization, Last-Event-ID, the session cookie, tracing and CSRF headers, and an
Idempotency-Key it ignores) with garbage, JWT-shaped and valid values, and extreme values for
the documented parameters and body fields (huge digit strings, far-out times, deep JSON)."""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from tether_testkit.grpc_metadata import PRINTABLE, jwt_shaped, signed_odd_claims
from tether_testkit.proto_strategies import digit_strings, json_values, page_tokens, texts

FAR_TIMES = [
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "0001-01-01T00:00:00-23:59",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:59:59.999999+23:59",
    "+275760-09-13T00:00:00Z",
    "99999-01-01T00:00:00Z",
    "1970-01-01T00:00:00Z",
    "2026-02-30T00:00:00Z",
    "2026-01-01T25:00:00Z",
    "2026-01-01T00:00:00+24:00",
    "2026-01-01",
    "1099511627776",
]


def times() -> st.SearchStrategy[str]:
    offsets = st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
    any_time = st.builds(
        lambda d, tz: d.replace(tzinfo=tz).isoformat(),
        st.datetimes(),
        st.one_of(st.just(UTC), offsets),
    )
    return st.one_of(st.sampled_from(FAR_TIMES), any_time, digit_strings(), texts())


def deep_json(max_depth: int = 5000) -> st.SearchStrategy[str]:
    return st.builds(
        lambda n, opener: opener * n + "1" + {"[": "]", '{"a":': "}"}[opener] * n,
        st.integers(1, max_depth),
        st.sampled_from(["[", '{"a":']),
    )


def query_value(schema: dict[str, Any], name: str) -> st.SearchStrategy[str]:
    if name == "pageToken":
        return page_tokens().filter(lambda t: len(t) < 7000)
    if schema.get("format") == "date-time":
        return times()
    if schema.get("type") == "integer":
        return st.one_of(digit_strings(), st.integers().map(str))
    return texts().filter(lambda t: len(t) < 3000)


def headers(valid_bearer: str) -> st.SearchStrategy[dict[str, str]]:
    """Latin-1 values (what a header carries); the user's own bearer most of the time."""
    latin = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=80)
    token = st.one_of(jwt_shaped(), signed_odd_claims(), PRINTABLE)
    authorization = st.one_of(
        st.just(valid_bearer),
        st.just(valid_bearer),
        st.just(valid_bearer),
        token.map(lambda t: f"Bearer {t}"),
        latin,
    )
    last_event_id = st.one_of(
        digit_strings().filter(str.isascii), st.integers().map(str), PRINTABLE
    )
    # A value a client can send: no leading or trailing whitespace (requests refuses it).
    return st.fixed_dictionaries(
        {"Authorization": authorization},
        optional={
            "Last-Event-ID": last_event_id,
            "Idempotency-Key": st.one_of(digit_strings().filter(str.isascii), latin),
            "Cookie": token.map(lambda t: f"tether_session={t}"),
            "X-Forwarded-For": latin,
            "traceparent": PRINTABLE,
            "Origin": latin,
            "Sec-Fetch-Site": latin,
            "X-CSRF-Token": latin,
        },
    ).map(lambda h: {k: v.strip() for k, v in h.items()})


def extreme_json() -> st.SearchStrategy[Any]:
    return st.one_of(
        json_values(),
        digit_strings(),
        st.sampled_from([10**400, -(10**400), 2**63, 2**64, 1e308, -0.0, "", None, [], {}]),
        deep_json(200).map(json.loads),
    )


def body(example: Any) -> st.SearchStrategy[bytes]:
    """The valid body with each field perhaps replaced by an extreme value, or deep JSON."""
    if isinstance(example, dict) and example:
        fields = st.fixed_dictionaries(
            {k: st.one_of(st.just(v), extreme_json()) for k, v in example.items()}
        )
        as_json = fields.map(lambda d: json.dumps(d).encode())
    else:
        as_json = extreme_json().map(lambda v: json.dumps(v).encode())
    return st.one_of(as_json, deep_json().map(str.encode))
