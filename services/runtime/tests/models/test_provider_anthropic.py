"""The Anthropic provider through the official SDK against a fake Messages API speaking the
streaming event protocol on a real socket (and refusing what the real API refuses)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tether_runtime.models import AnthropicProvider, build_provider
from tether_sdk import Anthropic, ModelError, ModelRequest, ToolCall, ToolSchema, Usage
from tether_testkit.fake_anthropic import FakeAnthropic
from tether_testkit.fake_llm import FakeCall, Reply
from tether_testkit.sdk_clients import closes_at_test_end

KEY = "sk-ant-test-do-not-log-0123456789abcdef"

LOOKUP = ToolSchema(
    "recent_errors",
    "Recent errors of a service",
    {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
)


def ask(text: str = "what broke?", **kw: Any) -> ModelRequest:
    return ModelRequest(
        kw.pop("instructions", "You are OpsPilot."),
        kw.pop("context", "Known facts: none."),
        kw.pop("messages", [{"role": "user", "content": text}]),
        kw.pop("tools", [LOOKUP]),
        **kw,
    )


OPEN: list[Any] = []  # providers to close at the test's end (tether_testkit.sdk_clients)
close_providers = closes_at_test_end(OPEN)


def provider(llm: FakeAnthropic, **config: Any) -> AnthropicProvider:
    p = build_provider(
        Anthropic(model="claude-test", **config),
        base_url=llm.base_url,
        api_key=KEY,
        agent="opspilot",
    )
    assert isinstance(p, AnthropicProvider)
    OPEN.append(p)
    return p


async def collect(p: AnthropicProvider, request: ModelRequest) -> list[Any]:
    return [c async for c in p.stream(request)]


def text(got: list[Any]) -> str:
    return "".join(c for c in got if isinstance(c, str))


async def failure(p: AnthropicProvider, request: ModelRequest) -> tuple[list[Any], ModelError]:
    got: list[Any] = []
    with pytest.raises(ModelError) as info:
        async for c in p.stream(request):
            got.append(c)
    assert KEY not in str(info.value) and KEY[-8:] not in info.value.message
    return got, info.value


async def test_text_streams_with_usage_and_the_request_is_a_messages_call():
    async with FakeAnthropic(
        [Reply(text=["payment-api ", "had 12 errors."], usage=(40, 8))]
    ) as llm:
        got = await collect(provider(llm, max_output_tokens=512), ask())
    assert got == ["payment-api ", "had 12 errors.", Usage(40, 8)]
    (sent,) = llm.requests
    assert sent.path == "/v1/messages"
    # This SDK version sends the API key as a bearer token; the fake accepts it or x-api-key.
    assert sent.header("authorization") == f"Bearer {KEY}" or sent.header("x-api-key") == KEY
    assert sent.header("anthropic-version")
    assert sent.header("x-stainless-retry-count") == "0"
    body = sent.body
    assert body["model"] == "claude-test" and body["max_tokens"] == 512 and body["stream"] is True
    assert body["system"] == "You are OpsPilot.\n\nKnown facts: none."
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what broke?"}]}
    ]
    assert body["tools"] == [
        {
            "name": "recent_errors",
            "description": "Recent errors of a service",
            "input_schema": LOOKUP.parameters,
        }
    ]


async def test_tool_use_blocks_are_assembled_from_json_deltas():
    calls = [
        FakeCall("recent_errors", {"service": "payment-api", "env": "prod"}, pieces=6),
        FakeCall("recent_errors", {"service": "auth"}, id="toolu_same"),
        FakeCall("recent_errors", {"service": "db"}, id="toolu_same"),
    ]
    async with FakeAnthropic([Reply(text="Looking.", calls=calls, usage=(30, 20))]) as llm:
        got = await collect(provider(llm), ask())
    assert got[:2] == ["Looking.", Usage(30, 20)]
    first, second, third = got[2:]
    assert first.name == "recent_errors" and first.args == {"service": "payment-api", "env": "prod"}
    assert first.call_id.startswith("toolu_01")
    assert second == ToolCall("recent_errors", {"service": "auth"}, "toolu_same")
    assert third == ToolCall("recent_errors", {"service": "db"}, "toolu_same")


async def test_malformed_input_json_comes_back_as_an_invalid_call():
    async with FakeAnthropic([Reply(calls=[FakeCall("recent_errors", '{"service": ')])]) as llm:
        got = await collect(provider(llm), ask())
    (call,) = [c for c in got if isinstance(c, ToolCall)]
    assert call.args == {} and "not valid JSON" in call.invalid and call.raw_args == '{"service": '


async def test_the_conversation_alternates_with_tool_results_merged_into_one_user_turn():
    """Engine ids with characters Anthropic refuses are mapped on both sides; the fake refuses
    unmatched tool results, empty text blocks and tool blocks without tools, as the API does."""
    messages = [
        {"role": "user", "content": "check both"},
        {"role": "user", "content": "please"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "run:1/call.0", "name": "recent_errors", "args": {"service": "a"}},
                {"id": "run:1/call.1", "name": "recent_errors", "args": {"service": "b"}},
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "run:1/call.0",
            "name": "recent_errors",
            "content": '{"ok": true}',
        },
        {
            "role": "tool",
            "tool_call_id": "run:1/call.1",
            "name": "recent_errors",
            "content": '{"ok": false}',
        },
        {"role": "user", "content": "and?"},
    ]
    async with FakeAnthropic(["Both fine."]) as llm:
        assert text(await collect(provider(llm), ask(messages=messages))) == "Both fine."
    sent = llm.requests[0].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["text"] for b in sent[0]["content"]] == ["check both", "please"]
    uses = [b for b in sent[1]["content"] if b["type"] == "tool_use"]
    assert sent[1]["content"][0] == {"type": "text", "text": "Checking."}
    assert [u["input"] for u in uses] == [{"service": "a"}, {"service": "b"}]
    results = sent[2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert [r["tool_use_id"] for r in results[:2]] == [u["id"] for u in uses]
    assert "is_error" not in results[0] and results[1]["is_error"] is True


async def test_a_summary_sends_no_tools_and_the_turns_as_a_transcript():
    messages = [
        {"role": "user", "content": "restart payment-api"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "restart", "args": {"svc": "payment-api"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "restart", "content": '{"ok": true}'},
    ]
    async with FakeAnthropic(["Summary."]) as llm:
        assert (
            text(await collect(provider(llm), ask(messages=messages, purpose="summary")))
            == "Summary."
        )
    body = llm.requests[0].body
    assert "tools" not in body
    (turn,) = body["messages"]
    assert turn["role"] == "user" and "restart" in turn["content"][0]["text"]


async def test_continue_from_is_a_prefill_without_trailing_space_and_joins_exactly():
    seen = "The migration timed out after "
    async with FakeAnthropic([Reply(text=[" 30", " seconds."])]) as llm:
        got = await collect(provider(llm), ask(continue_from=seen))
    assert seen + text(got) == "The migration timed out after 30 seconds."
    last = llm.requests[0].body["messages"][-1]
    assert last == {"role": "assistant", "content": [{"type": "text", "text": seen.rstrip()}]}


async def test_continue_from_mid_word_passes_the_continuation_untouched():
    seen = "The migration timed ou"
    async with FakeAnthropic([Reply(text=["t after ", "30 seconds."])]) as llm:
        got = await collect(provider(llm), ask(continue_from=seen))
    assert seen + text(got) == "The migration timed out after 30 seconds."


async def test_max_tokens_reports_usage_then_truncation():
    async with FakeAnthropic([Reply(text="cut off", stop="length", usage=(10, 64))]) as llm:
        got, err = await failure(provider(llm, max_output_tokens=64), ask())
    assert got == ["cut ", "off", Usage(10, 64)]
    assert err.code == "MODEL_OUTPUT_TRUNCATED" and not err.retryable and "64" in err.message


@pytest.mark.parametrize(
    ("reply", "retry_after"),
    [
        (Reply(status=429, retry_after="3"), 3.0),
        (Reply(status=529), None),
        (Reply(status=500, retry_after="1.5"), 1.5),
    ],
)
async def test_rate_limits_and_overload_are_retryable_with_the_providers_wait(reply, retry_after):
    async with FakeAnthropic([reply]) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == "MODEL_UNAVAILABLE" and err.retryable
    assert err.status == reply.status and err.retry_after_s == retry_after


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, "MODEL_AUTH_FAILED"),
        (403, "MODEL_AUTH_FAILED"),
        (404, "MODEL_NOT_FOUND"),
        (400, "MODEL_REJECTED_REQUEST"),
        (413, "MODEL_REJECTED_REQUEST"),
    ],
)
async def test_client_errors_end_the_run_with_a_code(status, code):
    async with FakeAnthropic([Reply(status=status)]) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == code and not err.retryable and err.status == status


async def test_a_wrong_key_is_auth_failed_without_the_key():
    async with FakeAnthropic(["never"], api_key="sk-ant-right", echo_key_in_errors=True) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == "MODEL_AUTH_FAILED" and "agent opspilot" in err.message
    assert "invalid x-api-key" in err.message


async def test_an_overloaded_error_event_mid_stream_is_retryable():
    async with FakeAnthropic([Reply(text="one two three", error_after=5)]) as llm:
        got, err = await failure(provider(llm), ask())
    assert got == ["one ", "two "]
    assert err.code == "MODEL_UNAVAILABLE" and err.retryable and "overloaded_error" in err.message


async def test_an_invalid_request_error_event_mid_stream_is_not_retried():
    async with FakeAnthropic(
        [Reply(text="x", error_after=1, error_type="invalid_request_error")]
    ) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == "MODEL_REJECTED_REQUEST" and not err.retryable


async def test_a_dropped_stream_is_retryable_after_the_text_it_gave():
    async with FakeAnthropic([Reply(text="one two three four", drop_after=5)]) as llm:
        got, err = await failure(provider(llm), ask())
    assert got == ["one ", "two "]
    assert err.code == "MODEL_UNAVAILABLE" and err.retryable


async def test_an_unreadable_event_is_a_protocol_error():
    async with FakeAnthropic([Reply(text="one two", garbage_after=4)]) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == "MODEL_PROTOCOL_ERROR" and not err.retryable


async def test_a_slow_provider_times_out_retryably():
    async with FakeAnthropic([Reply(text="slow", delay_s=1.0)]) as llm:
        _, err = await failure(provider(llm, timeout_s=0.3), ask())
    assert err.code == "MODEL_UNAVAILABLE" and err.retryable


async def test_an_anthropic_agent_without_a_key_fails_at_build():
    with pytest.raises(ValueError, match="TETHER_ANTHROPIC_API_KEY"):
        build_provider(Anthropic(), base_url="", api_key="")


async def test_a_base_url_with_v1_is_accepted():
    async with FakeAnthropic(["ok"]) as llm:
        p = build_provider(Anthropic(model="m"), base_url=llm.base_url + "/v1/", api_key=KEY)
        OPEN.append(p)
        assert text([c async for c in p.stream(ask())]) == "ok"


async def test_the_key_is_in_no_repr_and_no_log_line(caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("anthropic", "httpx", "httpx2", "httpcore"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    async with FakeAnthropic(
        [Reply(text="hi"), Reply(status=529), Reply(text="a b c", drop_after=4)]
    ) as llm:
        p = provider(llm)
        await collect(p, ask())
        for _ in range(2):
            with pytest.raises(ModelError) as info:
                await collect(p, ask())
            assert KEY not in repr(info.value) and KEY not in str(info.value.__dict__)
    assert caplog.records, "the SDK logged nothing at DEBUG: the check would prove nothing"
    assert KEY not in caplog.text and KEY[-8:] not in caplog.text
    assert KEY not in repr(p)
