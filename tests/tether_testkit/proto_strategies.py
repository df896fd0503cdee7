"""Hypothesis strategies for protobuf messages, derived from their descriptors: every field by its
type, with the values parsers get wrong (huge and Unicode digit strings, integers at their limits,
unknown enum numbers, timestamps far outside any calendar, page tokens of deep JSON). A field
named like an id also gets the real ids a test passes in, so the fuzz reaches past NOT_FOUND."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
# Seconds a google.protobuf.Timestamp may hold (0001-01-01 .. 9999-12-31), its edges and past them.
TIMESTAMP_SECONDS = [
    0,
    1,
    -1,
    1_700_000_000,
    253_402_300_799,
    253_402_300_800,
    -62_135_596_800,
    -62_135_596_801,
    2**40,
    -(2**40),
    2**62,
    2**63 - 1,
    -(2**63),
]
TIMESTAMP_NANOS = [0, 1, 999_999_999, 1_000_000_000, -1, 2**31 - 1, -(2**31)]
DIGITS_UNICODE = "0123456789\u00b2\u00b3\u00b9\u0660\u0661\u0663\u06f5\u0966\uff11\U0001d7ce"
NESTING = 2  # nested messages below this depth are left unset


def integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [lo, hi, 0, 1, -1, lo + 1, hi - 1]
    return st.one_of(st.sampled_from([e for e in edges if lo <= e <= hi]), st.integers(lo, hi))


def digit_strings() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(0, 10_000).map(lambda n: "9" * n),
        st.text(DIGITS_UNICODE, min_size=1, max_size=40),
        st.integers().map(str),
    )


def texts() -> st.SearchStrategy[str]:
    """Strings protobuf can carry (UTF-8: no lone surrogates), NUL included."""
    return st.one_of(
        st.text(st.characters(codec="utf-8"), max_size=60),
        digit_strings(),
        st.sampled_from(
            ["", " ", "-", "*", "null", "\x00", "a\x00b", "\u202e", "\ufeff", "é" * 3000]
        ),
        st.integers(0, 300_000).map(lambda n: "x" * n),
    )


def json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_tokens() -> st.SearchStrategy[str]:
    """Tokens shaped like the issued ones (base64url JSON), with any content, and deep JSON."""
    shaped = st.fixed_dictionaries(
        {}, optional={"id": json_values(), "f": json_values(), "t": json_values()}
    )
    return st.one_of(
        texts(),
        json_values().map(lambda v: b64(json.dumps(v).encode())),
        shaped.map(lambda v: b64(json.dumps(v).encode())),
        st.integers(1, 100_000).map(lambda n: b64(b"[" * n + b"]" * n)),
    )


def timestamps(cls: type[Message]) -> st.SearchStrategy[Message]:
    seconds = st.one_of(st.sampled_from(TIMESTAMP_SECONDS), integers(-(2**63), 2**63 - 1))
    nanos = st.one_of(st.sampled_from(TIMESTAMP_NANOS), integers(-(2**31), 2**31 - 1))
    return st.builds(lambda s, n: cls(seconds=s, nanos=n), seconds, nanos)


class MessageStrategies:
    """Strategies for the messages under `Descriptor`s; `ids` maps a field-name suffix
    (e.g. "conversation_id") to real values to mix in."""

    def __init__(self, ids: Mapping[str, Sequence[str]] | None = None) -> None:
        self.ids = dict(ids or {})

    def message(self, desc: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
        cls = message_factory.GetMessageClass(desc)
        if desc.full_name == "google.protobuf.Timestamp":
            return timestamps(cls)
        fields = {f.name: self.field(f, depth) for f in desc.fields}
        if depth > 0:
            fields = {n: s for n, s in fields.items() if s is not None}
        return st.fixed_dictionaries({}, optional=fields).map(lambda kw: cls(**kw))

    def field(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            key_f, value_f = (
                f.message_type.fields_by_name["key"],
                f.message_type.fields_by_name["value"],
            )
            return st.dictionaries(
                self.scalar(key_f, depth), self.scalar(value_f, depth), max_size=3
            )
        one = self.scalar(f, depth)
        if f.is_repeated:
            return st.lists(one, max_size=3)
        return one

    def scalar(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        kind = f.type
        if kind == FieldDescriptor.TYPE_MESSAGE:
            if depth >= NESTING and f.message_type.full_name != "google.protobuf.Timestamp":
                return st.just(message_factory.GetMessageClass(f.message_type)())
            return self.message(f.message_type, depth + 1)
        if kind == FieldDescriptor.TYPE_ENUM:
            known = [v.number for v in f.enum_type.values]
            return st.one_of(st.sampled_from(known), integers(-(2**31), 2**31 - 1))
        if kind in INT_RANGES:
            return integers(*INT_RANGES[kind])
        if kind == FieldDescriptor.TYPE_BOOL:
            return st.booleans()
        if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return st.floats(width=32 if kind == FieldDescriptor.TYPE_FLOAT else 64)
        if kind == FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=64)
        return self.string(f.name)

    def string(self, name: str) -> st.SearchStrategy[str]:
        if name.endswith("page_token"):
            return page_tokens()
        real = [v for suffix, values in self.ids.items() if name.endswith(suffix) for v in values]
        if real:
            return st.one_of(st.sampled_from(real), texts())
        return texts()
