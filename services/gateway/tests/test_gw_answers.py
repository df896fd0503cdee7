"""A question's answer over HTTP: `option` or `fill` (or the plain `input`) becomes ResumeRun's
`input`; at most one of them, of the right shape and size, else 400 before the runtime is asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from gw_fake_runtime import FakeRuntime
from tether.runtime.v1 import events_pb2


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _resume(client: TestClient[Any, Any], token: str, **fields: Any) -> Any:
    body = {"interruptId": "int_1", "decision": "respond", "idempotencyKey": "k1", **fields}
    return await client.post("/v1/runs/run_1/resume", json=body, headers=_auth(token))


@pytest.mark.parametrize(
    ("fields", "sent"),
    [
        ({"option": "payment-api-2"}, "payment-api-2"),
        ({"fill": {"replicas": 4, "note": "peak é"}}, '{"replicas":4,"note":"peak é"}'),
        ({"fill": {}}, "{}"),
        ({"input": '{"replicas": 4}'}, '{"replicas": 4}'),
        # null is the same as leaving a field out.
        ({"option": "a", "fill": None, "input": None}, "a"),
    ],
)
async def test_answer_fields_become_the_input(
    client: TestClient[Any, Any],
    fake_runtime: tuple[FakeRuntime, str],
    user_token: str,
    fields: dict[str, Any],
    sent: str,
) -> None:
    fake = fake_runtime[0]
    fake.add_run("run_1")
    resp = await _resume(client, user_token, **fields)
    assert resp.status == 202, await resp.text()
    (req,) = fake.resumes
    assert (req.decision, req.input) == (events_pb2.DECISION_RESPONDED, sent)
    if sent.startswith("{"):
        assert json.loads(req.input) == json.loads(sent)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"option": "a", "fill": {"x": 1}}, "at most one of input, option, fill"),
        ({"input": "a", "option": "a"}, "at most one of input, option, fill"),
        ({"fill": [1, 2]}, "'fill' must be a JSON object"),
        ({"fill": "{}"}, "'fill' must be a JSON object"),
        ({"fill": 3}, "'fill' must be a JSON object"),
        ({"option": 3}, "'option' must be a string"),
        ({"option": "x" * 501}, "'option' is longer than 500"),
        ({"fill": {"note": "a\u0000b"}}, "cannot be stored"),
        ({"fill": {"a\u0000": 1}}, "cannot be stored"),
        ({"fill": {"deep": [[[{"x": "\ud800"}]]]}}, "cannot be stored"),
        ({"option": "a", "decision": "approve"}, "'option' answers only with decision 'respond'"),
        ({"fill": {}, "decision": "retry"}, "'fill' answers only with decision 'respond'"),
    ],
)
async def test_bad_answers_are_400_and_never_reach_the_runtime(
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
    assert error["code"] == "INVALID_ARGUMENT"
    assert message in error["message"], error
    assert fake_runtime[0].resumes == []


async def test_deep_fill_is_400(
    client: TestClient[Any, Any], fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    fill: Any = {}
    inner = fill
    for _ in range(40):
        inner["x"] = {}
        inner = inner["x"]
    resp = await _resume(client, user_token, fill=fill)
    assert resp.status == 400
    assert "nested deeper" in (await resp.json())["error"]["message"]
    assert fake_runtime[0].resumes == []


async def test_long_fill_is_400(
    make_client: Any, fake_runtime: tuple[FakeRuntime, str], user_token: str
) -> None:
    client = await make_client(max_body_bytes=64 * 1024)
    resp = await _resume(client, user_token, fill={"note": "x" * 8000})
    assert resp.status == 400
    assert "longer than 8000 characters as JSON" in (await resp.json())["error"]["message"]
    assert fake_runtime[0].resumes == []


async def test_an_interrupted_run_with_no_pending_interrupt_answers_from_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two resumes at once: the second may read the run as interrupted after the first answered
    its interrupt (none pending). The interrupt to key the answer on is then the newest the log
    raised, as for a run already resumed, not an empty one (which was refused as a form)."""
    from types import SimpleNamespace

    from tether.runtime.v1 import resources_pb2
    from tether_gateway.langgraph import lookup, run_start

    raised = events_pb2.RunEvent(sequence=3)
    raised.interrupt.interrupt_id = "int_1"
    raised.interrupt.kind = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION

    async def read_log(*_: Any) -> list[events_pb2.RunEvent]:
        return [raised]

    monkeypatch.setattr(lookup, "read_log", read_log)
    latest = resources_pb2.Run(id="run_1", status=resources_pb2.RUN_STATUS_INTERRUPTED)
    gw: Any = SimpleNamespace(client=lambda: None)
    caller: Any = SimpleNamespace(credential="token")
    got = await run_start._newest_interrupt(gw, caller, latest)
    assert (got.id, got.run_id, got.kind) == ("int_1", "run_1", raised.interrupt.kind)
