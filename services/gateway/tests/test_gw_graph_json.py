"""A graph's JSON over the HTTP API: a start's `input` object becomes StartRun's `input_json`
(with or without `text`), a resume's `value` (any JSON) becomes ResumeRun's `value_json`; bad
ones are 400 before the runtime is asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from gw_fake_runtime import FakeRuntime
from tether.runtime.v1 import events_pb2


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _start(client: TestClient[Any, Any], token: str, stream: bool, **fields: Any) -> Any:
    headers = {**_auth(token), **({"Accept": "text/event-stream"} if stream else {})}
    return await client.post("/v1/conversations/conv_1/runs", json=fields, headers=headers)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("fields", "sent"),
    [
        ({"input": {"messages": [{"role": "user", "content": "hi é"}]}}, ""),
        ({"input": {"topic": "x", "n": 2}, "text": "also text"}, "also text"),
        ({"text": "only text"}, "only text"),
    ],
)
async def test_start_input_becomes_input_json(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    stream: bool,
    fields: dict[str, Any],
    sent: str,
) -> None:
    fake = fake_runtime[0]
    resp = await _start(client, user_token, stream, **fields)
    assert resp.status == 201, await resp.text()
    await resp.read()
    [(text, input_json)] = fake.start_inputs
    assert text == sent
    if "input" in fields:
        assert json.loads(input_json) == fields["input"]
        assert " " not in input_json.replace("hi é", ""), "compact JSON"
    else:
        assert input_json == ""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give field 'text' or field 'input'"),
        ({"text": "   "}, "give field 'text' or field 'input'"),
        ({"input": None}, "'input' must be a JSON object"),
        ({"input": [{"role": "user"}]}, "'input' must be a JSON object"),
        ({"input": "hi"}, "'input' must be a JSON object"),
        ({"input": {}}, "'input' must not be empty"),
        ({"input": {"a\u0000": 1}}, "cannot be stored"),
        ({"input": {"x": 1}, "text": 3}, "'text' must be a string"),
    ],
)
async def test_bad_start_input_is_400_and_starts_nothing(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    fields: dict[str, Any],
    message: str,
) -> None:
    resp = await _start(client, user_token, False, **fields)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "INVALID_ARGUMENT" and message in error["message"], error
    assert fake_runtime[0].starts == []


async def _resume(client: TestClient[Any, Any], token: str, **fields: Any) -> Any:
    body = {"interruptId": "int_1", "decision": "respond", "idempotencyKey": "k1", **fields}
    return await client.post("/v1/runs/run_1/resume", json=body, headers=_auth(token))


@pytest.mark.parametrize(
    ("value", "sent"),
    [
        ({"approved": True, "note": "ok é"}, '{"approved":true,"note":"ok é"}'),
        ("edit the title", '"edit the title"'),
        ([1, 2], "[1,2]"),
        (False, "false"),
        (None, "null"),
        (0, "0"),
    ],
)
async def test_resume_value_becomes_value_json(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    value: Any,
    sent: str,
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    resp = await _resume(client, user_token, value=value)
    assert resp.status == 202, await resp.text()
    (req,) = fake.resumes
    assert (req.decision, req.input, req.value_json) == (events_pb2.DECISION_RESPONDED, "", sent)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"value": 1, "decision": "approve"}, "'value' answers only with decision 'respond'"),
        ({"value": 1, "input": "x"}, "'value' alone"),
        ({"value": 1, "option": "x"}, "'value' alone"),
        ({"value": 1, "fill": {"x": 1}}, "'value' alone"),
        ({"value": {"k": "a\u0000"}}, "cannot be stored"),
        ({"value": ["\ud800"]}, "cannot be stored"),
    ],
)
async def test_bad_resume_value_is_400_and_never_reaches_the_runtime(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    fields: dict[str, Any],
    message: str,
) -> None:
    fake_runtime[0].add_run("run_1")
    resp = await _resume(client, user_token, **fields)
    assert resp.status == 400, await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "INVALID_ARGUMENT" and message in error["message"], error
    assert fake_runtime[0].resumes == []
