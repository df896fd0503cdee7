"""tether_common.json_codec: orjson's speed, the standard library's values."""

from __future__ import annotations

import json

import pytest
from tether_common import json_codec

VALUES = [
    {"role": "user", "content": 'héllo \u2028 \x00 "q"', "n": [1, 2.5, -3e-9, True, None]},
    {"big": 2**70, "neg": -(2**65)},  # beyond 64 bits: the standard library encodes these
    {1: "int key", 2.5: "float key"},  # keys become strings, as json.dumps makes them
    [],
    "plain",
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_gives_the_standard_librarys_value(value: object) -> None:
    text = json_codec.dumps(value)
    assert json.loads(text) == json.loads(json.dumps(value))


def test_compact_and_utf8() -> None:
    assert json_codec.dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'


def test_not_encodable_raises() -> None:
    with pytest.raises(TypeError):
        json_codec.dumps({"x": object()})
