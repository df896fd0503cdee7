"""ScriptedModel: the same transcript gives the same step, with the same call ids, so a step
retried after a crash repeats itself exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sdk_testing import make_ctx
from tether_sdk import ModelRequest, ScriptedModel, ToolCall, ToolContext, Usage


def _request(messages: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(instructions="i", context="", messages=messages, tools=[])


def _policy(request: ModelRequest) -> Any:
    if request.results():
        return "done: " + request.results()[-1].summary
    return [ToolCall("look", {"service": "a"}), ToolCall("look", {"service": "b"})]


async def _step(model: ScriptedModel, request: ModelRequest) -> list[Any]:
    return [c async for c in model.stream(request) if not isinstance(c, Usage)]


async def test_a_scripted_step_reports_its_estimated_usage() -> None:
    model = ScriptedModel(lambda r: "three small words", delay_s=0)
    request = _request([{"role": "user", "content": "x" * 40}])
    usage = [c async for c in model.stream(request) if isinstance(c, Usage)]
    assert sum(u.input_tokens for u in usage) == (len("i") + 40 + 3) // 4
    assert sum(u.output_tokens for u in usage) == (len("three small words") + 3) // 4


async def test_a_summary_request_gets_an_extractive_summary_not_the_policy() -> None:
    def never(r: ModelRequest) -> str:
        raise AssertionError("the policy is not asked to summarise")

    model = ScriptedModel(never, delay_s=0)
    request = ModelRequest(
        instructions="summarise",
        context="",
        messages=[
            {"role": "user", "content": "Restart web-1. It is down."},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Scale api to 3"},
        ],
        tools=[],
        purpose="summary",
    )
    assert await _step(model, request) == ["Earlier the user asked: Restart web-1; Scale api to 3"]


async def test_call_ids_are_stable_for_the_same_transcript() -> None:
    model = ScriptedModel(_policy, delay_s=0)
    msgs = [{"role": "user", "content": "look at a and b"}]
    first = await _step(model, _request(msgs))
    again = await _step(ScriptedModel(_policy, delay_s=0), _request([dict(m) for m in msgs]))
    assert first == again
    ids = [c.call_id for c in first]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    other = await _step(model, _request([{"role": "user", "content": "something else"}]))
    assert not {c.call_id for c in other} & set(ids)


async def test_a_policys_own_call_id_is_kept() -> None:
    model = ScriptedModel(lambda r: ToolCall("look", {}, "mine"), delay_s=0)
    assert await _step(model, _request([{"role": "user", "content": "x"}])) == [
        ToolCall("look", {}, "mine")
    ]


async def test_text_streams_word_by_word() -> None:
    model = ScriptedModel(lambda r: "three small words", delay_s=0)
    assert await _step(model, _request([])) == ["three ", "small ", "words"]
    pieces = ScriptedModel(lambda r: ["a", "b"], delay_s=0)
    assert await _step(pieces, _request([])) == ["a", "b"]


def test_the_delay_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_SCRIPTED_DELAY_S", "0.5")
    assert ScriptedModel(_policy).delay_s == 0.5
    assert ScriptedModel(_policy, delay_s=0).delay_s == 0


def test_the_request_gives_the_results_since_the_last_user_message() -> None:
    def tool_msg(call_id: str, outcome: str, ok: bool) -> dict[str, Any]:
        body = {"ok": ok, "summary": outcome, "data": {"x": 1}, "outcome": outcome}
        return {"role": "tool", "tool_call_id": call_id, "name": "t", "content": json.dumps(body)}

    r = _request(
        [
            {"role": "user", "content": "first"},
            tool_msg("c0", "ok", True),
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "second"},
            tool_msg("c1", "invalid", False),
            tool_msg("c2", "ok", True),
        ]
    )
    assert r.last_user_text() == "second"
    assert [(o.call_id, o.outcome, o.ok) for o in r.results()] == [
        ("c1", "invalid", False),
        ("c2", "ok", True),
    ]
    assert r.results()[1].data == {"x": 1}
    assert [m["content"] for m in r.earlier_messages() if m["role"] != "tool"] == [
        "first",
        "answer",
    ]


async def test_progress_is_a_fraction() -> None:
    sent: list[tuple[float, str]] = []

    async def record(fraction: float, text: str) -> None:
        sent.append((fraction, text))

    ctx = ToolContext(**{**make_ctx().__dict__, "_progress": record})
    await ctx.progress(0.5, "half" + "x" * 300)
    with pytest.raises(ValueError, match="within 0..1"):
        await ctx.progress(1.5)
    assert sent == [(0.5, ("half" + "x" * 300)[:200])]
    assert 0 < ctx.time_left() <= 10
    await make_ctx().progress(1.0)  # without a channel: nothing, no error
