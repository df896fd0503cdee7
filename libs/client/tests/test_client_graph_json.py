"""`start(input=...)` and `resume(value=...)` refuse what the runtime would, before any call (no
server here: the channel is never used); the decision key tells values apart. (Against a real
runtime: tests/integration/test_graph_json_http.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tether_client import InvalidArgument, TetherClient, decision_key
from tether_client.client import graph_json


@pytest.fixture
async def client() -> AsyncIterator[TetherClient]:
    async with TetherClient("127.0.0.1:1", token="t") as c:
        yield c


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give text or input"),
        ({"input": {}}, "give text or input"),
        ({"input": ["not", "an", "object"]}, "must be a mapping"),
        ({"input": {"x": float("nan")}}, "input is not JSON"),
        ({"input": {"x": object()}}, "input is not JSON"),
    ],
)
async def test_bad_start_input(client: TetherClient, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await client.start("conv_1", **kwargs)


@pytest.mark.parametrize(
    ("decision", "kwargs", "message"),
    [
        ("approve", {"value": True}, "only with decision 'respond'"),
        ("respond", {"value": 1, "input": "x"}, "input or value, not both"),
        ("respond", {"value": {1j}}, "value is not JSON"),
    ],
)
async def test_bad_resume_value(
    client: TetherClient, decision: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        await client.resume("run_1", "int_1", decision, **kwargs)


def test_values_are_compact_json_and_keys_tell_them_apart() -> None:
    assert graph_json({"a": [1, None], "é": True}, "value") == '{"a":[1,null],"é":true}'
    assert graph_json(None, "value") == "null"
    plain = decision_key("run_1", "int_1", 3, "")
    assert decision_key("run_1", "int_1", 3, "", "") == plain, "old keys unchanged"
    keys = {plain, *(decision_key("run_1", "int_1", 3, "", graph_json(v, "v")) for v in (1, "1"))}
    assert len(keys) == 3
    assert decision_key("run_1", "int_1", 3, '"x"') != decision_key("run_1", "int_1", 3, "", '"x"')
