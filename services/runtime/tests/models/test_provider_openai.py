"""The OpenAI-compatible provider through the official SDK against a fake server speaking the
chat-completions streaming protocol on a real socket."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from tether_runtime.models import OpenAIProvider, build_provider
from tether_sdk import ModelError, ModelRequest, OpenAICompatible, ToolCall, ToolSchema, Usage
from tether_testkit.fake_llm import FakeCall, Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.processes import free_port
from tether_testkit.sdk_clients import closes_at_test_end

KEY = "sk-test-do-not-log-0123456789abcdef"

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


def provider(llm: FakeOpenAI, key: str = KEY, **config: Any) -> OpenAIProvider:
    p = build_provider(
        OpenAICompatible(model="gpt-test", **config),
        base_url=llm.base_url,
        api_key=key,
        agent="opspilot",
    )
    assert isinstance(p, OpenAIProvider)
    OPEN.append(p)
    return p


async def collect(p: OpenAIProvider, request: ModelRequest) -> list[Any]:
    return [c async for c in p.stream(request)]


async def failure(p: OpenAIProvider, request: ModelRequest) -> tuple[list[Any], ModelError]:
    got: list[Any] = []
    with pytest.raises(ModelError) as info:
        async for c in p.stream(request):
            got.append(c)
    assert KEY not in str(info.value) and KEY[-8:] not in info.value.message
    return got, info.value


async def test_text_streams_with_usage_and_the_request_is_chat_completions():
    async with FakeOpenAI(
        [Reply(text=["payment-api ", "had ", "12 errors — naïve."], usage=(42, 9))]
    ) as llm:
        p = provider(llm, max_output_tokens=256)
        got = await collect(p, ask())
    assert got == ["payment-api ", "had ", "12 errors — naïve.", Usage(42, 9)]
    (sent,) = llm.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.header("authorization") == f"Bearer {KEY}"
    assert sent.header("x-stainless-retry-count") == "0"
    body = sent.body
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 256 and "max_completion_tokens" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are OpsPilot.\n\nKnown facts: none."},
        {"role": "user", "content": "what broke?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "recent_errors",
                "description": "Recent errors of a service",
                "parameters": LOOKUP.parameters,
            },
        }
    ]


async def test_one_client_serves_every_step():
    async with FakeOpenAI(["one", "two"]) as llm:
        p = provider(llm)
        client = p._client
        assert await collect(p, ask()) == [
            "one",
            Usage(*Reply(text="one").tokens(llm.requests[0].body)),
        ]
        await collect(p, ask())
        assert p._client is client and client.max_retries == 0
    assert len(llm.requests) == 2


async def test_fragmented_tool_calls_are_assembled_and_a_repeated_id_keeps_both_calls():
    calls = [
        FakeCall(
            "recent_errors", {"service": "payment-api", "env": "prod"}, id="call_same", pieces=5
        ),
        FakeCall("recent_errors", {"service": "auth"}, id="call_same", pieces=2),
    ]
    async with FakeOpenAI([Reply(text="Looking.", calls=calls, usage=(30, 12))]) as llm:
        got = await collect(provider(llm), ask())
    assert got == [
        "Looking.",
        Usage(30, 12),
        ToolCall("recent_errors", {"service": "payment-api", "env": "prod"}, "call_same"),
        ToolCall("recent_errors", {"service": "auth"}, "call_same"),
    ]


async def test_malformed_arguments_come_back_as_an_invalid_call():
    calls = [FakeCall("recent_errors", '{"service": "pay'), FakeCall("recent_errors", "[1, 2]")]
    async with FakeOpenAI([Reply(calls=calls)]) as llm:
        got = await collect(provider(llm), ask())
    first, second = (c for c in got if isinstance(c, ToolCall))
    assert first.args == {} and "not valid JSON" in first.invalid
    assert first.raw_args == '{"service": "pay'
    assert "JSON object" in second.invalid and second.raw_args == "[1, 2]"


async def test_tool_history_goes_back_in_the_protocols_shape():
    """Engine call ids the API would refuse (too long, odd characters) are mapped the same way
    on both sides; the fake refuses a tool message with no matching call."""
    engine_id = "run_0123456789abcdef:step-3:call/0:recent_errors"
    messages = [
        {"role": "user", "content": "errors?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": engine_id, "name": "recent_errors", "args": {"service": "x"}}],
        },
        {
            "role": "tool",
            "tool_call_id": engine_id,
            "name": "recent_errors",
            "content": '{"ok": true}',
        },
    ]
    async with FakeOpenAI(["done"]) as llm:
        assert (await collect(provider(llm), ask(messages=messages)))[0] == "done"
    sent = llm.requests[0].body["messages"]
    call_id = sent[2]["tool_calls"][0]["id"]
    assert sent[2]["content"] is None and len(call_id) <= 40
    assert sent[2]["tool_calls"][0]["function"] == {
        "name": "recent_errors",
        "arguments": '{"service": "x"}',
    }
    assert sent[3] == {"role": "tool", "tool_call_id": call_id, "content": '{"ok": true}'}


async def test_no_tools_is_no_tools_field():
    async with FakeOpenAI(["ok"]) as llm:
        await collect(provider(llm), ask(tools=[]))
    assert "tools" not in llm.requests[0].body


async def test_a_summary_sends_no_tools_and_the_turns_as_a_transcript():
    messages = [
        {"role": "user", "content": "restart payment-api"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "restart", "args": {"svc": "payment-api"}}],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "restart",
            "content": '{"ok": true, "summary": "restarted"}',
        },
        {"role": "assistant", "content": "Restarted."},
    ]
    async with FakeOpenAI(["The user had payment-api restarted."]) as llm:
        got = await collect(provider(llm), ask(messages=messages, purpose="summary"))
    assert "".join(c for c in got if isinstance(c, str)) == "The user had payment-api restarted."
    body = llm.requests[0].body
    assert "tools" not in body
    (system, user) = body["messages"]
    assert system["role"] == "system" and user["role"] == "user"
    assert "Summarise" in user["content"] and '"svc": "payment-api"' in user["content"]
    assert "restarted" in user["content"]


async def test_continue_from_is_sent_as_the_assistants_words_and_only_new_text_comes_back():
    seen = "The deploy failed because the database migration timed out after "
    # The model starts over (a common failure); the adapter drops the repeat.
    async with FakeOpenAI([Reply(text=[seen[:30], seen[30:], "30 seconds."])]) as llm:
        got = await collect(provider(llm), ask(continue_from=seen))
    assert "".join(c for c in got if isinstance(c, str)) == "30 seconds."
    messages = llm.requests[0].body["messages"]
    assert messages[-1] == {"role": "assistant", "content": seen}
    assert "Continue it exactly where it stopped" in messages[0]["content"]


async def test_continue_from_keeps_a_true_continuation_and_drops_a_repeated_tail():
    seen = "Checked payment-api: 12 errors in the last hour, mostly from "
    async with FakeOpenAI(
        [
            Reply(text=["the card ", "processor."]),
            Reply(text=["12 errors in the last hour, mostly from ", "the card processor."]),
        ]
    ) as llm:
        p = provider(llm)
        first = await collect(p, ask(continue_from=seen))
        second = await collect(p, ask(continue_from=seen))
    assert "".join(c for c in first if isinstance(c, str)) == "the card processor."
    assert "".join(c for c in second if isinstance(c, str)) == "the card processor."


async def test_length_reports_usage_then_truncation():
    async with FakeOpenAI([Reply(text="a long answer", stop="length", usage=(10, 256))]) as llm:
        got, err = await failure(provider(llm, max_output_tokens=256), ask())
    assert got == ["a ", "long ", "answer", Usage(10, 256)]
    assert err.code == "MODEL_OUTPUT_TRUNCATED" and not err.retryable and "256" in err.message


@pytest.mark.parametrize(
    ("reply", "retry_after"),
    [
        (Reply(status=429, retry_after="7"), 7.0),
        (Reply(status=429, headers={"retry-after-ms": "1500", "retry-after": "9"}), 1.5),
        (Reply(status=500), None),
        (Reply(status=503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"), 0.0),
    ],
)
async def test_rate_limits_and_server_errors_are_retryable_with_the_providers_wait(
    reply, retry_after
):
    async with FakeOpenAI([reply]) as llm:
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
        (422, "MODEL_REJECTED_REQUEST"),
    ],
)
async def test_client_errors_end_the_run_with_a_code(status, code):
    async with FakeOpenAI([Reply(status=status, error_message="no way")]) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == code and not err.retryable and err.status == status
    assert 'Provider said: "no way"' in err.message
    if status == 404:
        assert "gpt-test" in err.message


async def test_a_wrong_key_is_auth_failed_and_the_key_is_never_repeated():
    """The server echoes the whole key it got (as a careless compatible server might); the
    message keeps the provider's words without it."""
    async with FakeOpenAI(["never"], api_key="sk-the-right-one", echo_key_in_errors=True) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == "MODEL_AUTH_FAILED" and not err.retryable
    assert "check the API key configured for agent opspilot" in err.message
    assert "Incorrect API key provided" in err.message
    async with FakeOpenAI(["never"], api_key="sk-the-right-one") as llm:
        _, err = await failure(provider(llm), ask())
    assert "0123456789abcdef"[-4:] not in err.message.replace("401", ""), err.message


async def test_a_dropped_stream_is_retryable_after_the_text_it_gave():
    async with FakeOpenAI([Reply(text="one two three four five", drop_after=3)]) as llm:
        got, err = await failure(provider(llm), ask())
    assert got == ["one ", "two "]
    assert err.code == "MODEL_UNAVAILABLE" and err.retryable


async def test_an_error_inside_the_stream_is_retryable():
    async with FakeOpenAI([Reply(text="one two three", error_after=2)]) as llm:
        got, err = await failure(provider(llm), ask())
    assert got == ["one "] and err.retryable and "server_error" in err.message


async def test_an_unreadable_stream_is_a_protocol_error():
    async with FakeOpenAI([Reply(text="one two three", garbage_after=2)]) as llm:
        _, err = await failure(provider(llm), ask())
    assert err.code == "MODEL_PROTOCOL_ERROR" and not err.retryable


async def test_a_slow_provider_times_out_retryably():
    async with FakeOpenAI([Reply(text="slow answer", delay_s=1.0)]) as llm:
        _, err = await failure(provider(llm, timeout_s=0.3), ask())
    assert err.code == "MODEL_UNAVAILABLE" and err.retryable and "in time" in err.message


async def test_an_unreachable_server_is_retryable():
    p = build_provider(
        OpenAICompatible(model="m"), base_url=f"http://127.0.0.1:{free_port()}/v1", api_key=KEY
    )
    OPEN.append(p)
    with pytest.raises(ModelError) as info:
        async for _ in p.stream(ask()):
            pass
    assert info.value.retryable and "could not be reached" in info.value.message


async def test_a_keyless_server_gets_no_authorization_header():
    async with FakeOpenAI(["hi"]) as llm:
        await collect(provider(llm, key=""), ask())
    assert llm.requests[0].header("authorization") is None


async def test_the_key_is_in_no_repr_and_no_log_line(caplog):
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "httpx", "httpx2", "httpcore", "anthropic"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    async with FakeOpenAI(
        [Reply(text="hi"), Reply(status=429), Reply(text="a b c", drop_after=2)],
    ) as llm:
        p = provider(llm)
        await collect(p, ask())
        for _ in range(2):
            with pytest.raises(ModelError) as info:
                await collect(p, ask())
            assert KEY not in repr(info.value) and KEY not in str(info.value.__dict__)
    async with FakeOpenAI(["x"], api_key="sk-other", echo_key_in_errors=True) as llm:
        with pytest.raises(ModelError):
            await collect(provider(llm), ask())
    assert caplog.records, "the SDK logged nothing at DEBUG: the check would prove nothing"
    assert KEY not in caplog.text and KEY[-8:] not in caplog.text
    assert KEY not in repr(p) and KEY not in str(vars(p).get("_origin"))


async def test_official_openai_gets_max_completion_tokens():
    p = build_provider(
        OpenAICompatible(model="gpt-test", max_output_tokens=100),
        base_url="https://api.openai.com/v1",
        api_key=KEY,
    )
    assert isinstance(p, OpenAIProvider)
    OPEN.append(p)
    body = p.params(ask())
    assert body["max_completion_tokens"] == 100 and "max_tokens" not in body
