"""Token counting (agent/tokens.py) and in-run compaction (agent/compaction.py): no stores."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import pytest
import tiktoken
from tether_runtime.engine.agent import tokens
from tether_runtime.engine.agent.compaction import KEEP_RESULTS, compact
from tether_runtime.engine.agent.tokens import (
    ESTIMATE,
    MESSAGE_OVERHEAD,
    REPLY_OVERHEAD,
    EstimateCounter,
    TiktokenCounter,
    counter_for,
    truncate,
)


def tiny_encoding() -> tiktoken.Encoding:
    """Bytes are tokens, except "ab", which is one: a BPE small enough to build offline."""
    ranks = {bytes([i]): i for i in range(256)}
    ranks[b"ab"] = 256
    return tiktoken.Encoding(
        name="tiny", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={"<|end|>": 257}
    )


def model_name() -> str:
    return f"gpt-test-{uuid.uuid4().hex[:8]}"  # counters are cached per (provider, model)


def test_the_estimator_counts_four_ascii_characters_a_token_and_non_ascii_heavier() -> None:
    c = EstimateCounter()
    assert c.count("") == 0
    assert c.count("abcd" * 10) == 10
    assert c.count("abcde") == 2
    assert c.count("你好") == 3  # 6 bytes at half a token each
    assert c.count("a😀") == 3  # (1 + 2 * 4) / 4, rounded up
    assert c.count("你好") > c.count("ab")


def test_messages_cost_their_overhead_and_their_tool_call_arguments() -> None:
    c = EstimateCounter()
    assert c.count_messages([]) == REPLY_OVERHEAD
    plain = [{"role": "user", "content": "abcd" * 5}]
    assert c.count_messages(plain) == REPLY_OVERHEAD + MESSAGE_OVERHEAD + 5
    small = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "name": "f", "args": {}}],
    }
    large = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "name": "f", "args": {"q": "x" * 400}}],
    }
    assert c.count_messages([large]) - c.count_messages([small]) >= 100


def test_openai_counts_with_the_models_tiktoken_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def encoding_for_model(model: str) -> tiktoken.Encoding:
        asked.append(model)
        return tiny_encoding()

    monkeypatch.setattr(tiktoken, "encoding_for_model", encoding_for_model)
    name = model_name()
    counter = counter_for("openai", name)
    assert isinstance(counter, TiktokenCounter) and counter.wait(5) and asked == [name]
    assert counter.count("abab") == 2  # the merge: the encoding counted, not the estimator
    assert counter.count("xyz!") == 4
    assert counter.count("<|end|>") == 7  # special-token text is ordinary text
    assert counter_for("openai", name) is counter and asked == [name]  # cached


def test_an_unknown_openai_model_counts_with_o200k_base(monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown(model: str) -> tiktoken.Encoding:
        raise KeyError(model)

    loaded: list[str] = []

    def get_encoding(name: str) -> tiktoken.Encoding:
        loaded.append(name)
        return tiny_encoding()

    monkeypatch.setattr(tiktoken, "encoding_for_model", unknown)
    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    counter = counter_for("openai", model_name())
    assert isinstance(counter, TiktokenCounter) and counter.wait(5) and loaded == ["o200k_base"]
    assert counter.count("abab") == 2


def test_an_encoding_that_cannot_load_falls_back_to_the_estimate_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def offline(name: str) -> tiktoken.Encoding:
        raise ConnectionError("cannot reach openaipublic.blob.core.windows.net")

    monkeypatch.setattr(tiktoken, "encoding_for_model", offline)
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.setattr(tokens, "_warned", False)
    with caplog.at_level(logging.WARNING, logger=tokens.__name__):
        first = counter_for("openai", model_name())
        second = counter_for("openai", model_name())
        assert isinstance(first, TiktokenCounter) and isinstance(second, TiktokenCounter)
        assert not first.wait(5) and not second.wait(5)
    text = "counted by estimate, as the estimator would"
    assert first.count(text) == ESTIMATE.count(text)
    assert first.count_messages([{"role": "user", "content": text}]) == ESTIMATE.count_messages(
        [{"role": "user", "content": text}]
    )
    warnings = [r for r in caplog.records if r.name == tokens.__name__]
    assert len(warnings) == 1 and "TIKTOKEN_CACHE_DIR" in warnings[0].getMessage()


def test_a_slow_encoding_load_never_blocks_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def slow(model: str) -> tiktoken.Encoding:
        release.wait(10)  # a download that hangs
        return tiny_encoding()

    monkeypatch.setattr(tiktoken, "encoding_for_model", slow)
    started = time.monotonic()
    counter = counter_for("openai", model_name())
    assert counter.count("abab") == ESTIMATE.count("abab")  # estimating meanwhile
    assert time.monotonic() - started < 1
    release.set()
    assert isinstance(counter, TiktokenCounter) and counter.wait(5)
    assert counter.count("abab") == 2


def test_other_providers_use_the_estimator() -> None:
    for provider in ("anthropic", "scripted", "my-own"):
        assert counter_for(provider, "m") is ESTIMATE


def test_truncate_fits_the_budget_and_says_so() -> None:
    text = "word " * 400
    cut = truncate(text, 50, ESTIMATE)
    assert ESTIMATE.count(cut) <= 50 and cut.endswith("[...truncated]")
    assert text.startswith(cut.removesuffix(" [...truncated]"))
    assert truncate("short", 50, ESTIMATE) == "short"


def tool_result(n: int, size: int) -> dict:
    body = {
        "ok": True,
        "summary": f"looked up item {n}",
        "data": {"rows": "r" * size},
        "facts": {},
        "outcome": "ok",
    }
    return {
        "role": "tool",
        "tool_call_id": f"call_{n}_0",
        "name": "lookup",
        "content": json.dumps(body),
    }


def transcript(results: int, size: int) -> list[dict]:
    out: list[dict] = [
        {"role": "user", "content": "an earlier question " * 5},
        {"role": "assistant", "content": "an earlier answer " * 5},
        {"role": "user", "content": "look everything up"},
    ]
    for n in range(1, results + 1):
        out.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"call_{n}_0", "name": "lookup", "args": {"n": n}}],
            }
        )
        out.append(tool_result(n, size))
    return out


def test_compaction_cuts_the_oldest_tool_results_first_within_the_budget() -> None:
    messages = transcript(5, 800)
    before = json.loads(json.dumps(messages))
    budget = ESTIMATE.count_messages(messages) - 300  # two old results must go
    assert compact(messages, budget, ESTIMATE) is True
    assert ESTIMATE.count_messages(messages) <= budget
    results = [m for m in messages if m["role"] == "tool"]
    bodies = [json.loads(m["content"]) for m in results]
    flags = [bool(b.get("compacted")) for b in bodies]
    assert flags == [True, True, False, False, False]  # oldest first, only as far as needed
    assert bodies[0] == {
        "ok": True,
        "outcome": "ok",
        "summary": "looked up item 1",
        "compacted": True,
    }
    # Everything but those contents is as it was: the user's messages, the calls' structure.
    for m, old in zip(messages, before, strict=True):
        if m["role"] != "tool":
            assert m == old
        else:
            assert {k: v for k, v in m.items() if k != "content"} == {
                k: v for k, v in old.items() if k != "content"
            }
    assert compact(messages, budget, ESTIMATE) is False  # within the budget: nothing to do


def test_compaction_never_touches_the_newest_results_nor_the_runs_own_message() -> None:
    messages = transcript(4, 2000)
    own = messages[2]
    assert compact(messages, 200, ESTIMATE) is True  # cannot reach it: does what it may
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    assert [bool(b.get("compacted")) for b in results] == [True] * 2 + [False] * KEEP_RESULTS
    # The turns before the run's own message went; the run's own message stayed, first now.
    assert messages[0] == own
    assert [m["role"] for m in messages].count("assistant") == 4


def test_a_transcript_within_the_budget_is_left_alone() -> None:
    messages = transcript(3, 100)
    copy = json.loads(json.dumps(messages))
    assert compact(messages, ESTIMATE.count_messages(messages), ESTIMATE) is False
    assert messages == copy
