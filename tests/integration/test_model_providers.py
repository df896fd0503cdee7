"""Real providers end to end: a runtime process drives OpsPilot through the official `openai` and
`anthropic` SDKs against HTTP servers that speak each provider's streaming wire protocol
(tests/tether_testkit/fake_openai.py, fake_anthropic.py: the one fake allowed, a hosted LLM).

Each provider gets one runtime (TETHER_MODEL=openai|anthropic, a key the fake server checks) and
one server whose replies each test scripts. What must hold: a full approve flow; 429 with
Retry-After then success; a stream dropped mid-step, retried, its text streamed exactly once; a
401 ending the run cleanly without a retry; an answer cut at the output limit reported as such;
malformed tool arguments sent back to the model, not run; a provider repeating one call id across
steps; token usage in done, GetRun and the metrics; and the key in no log, event or response."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from tether.runtime.v1 import events_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.fake_anthropic import FakeAnthropic
from tether_testkit.fake_llm import FakeCall, FakeLLM, Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.processes import Proc, free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET

KEY = "sk-tether-test-KEY-must-never-leak-0123456789"


@dataclass
class Rig:
    provider: str
    llm: FakeLLM
    proc: Proc
    client: Client
    dsn: str

    def script(self, *replies: Reply) -> None:
        self.llm.replies = list(replies)
        self.llm.requests.clear()

    async def run(self, text: str) -> tuple[str, list[events_pb2.RunEvent]]:
        conv = await self.client.conversation()
        run = (await self.client.start(conv, text)).run
        return run.id, await self.client.events(run.id, until="interrupt")

    def stop_reason_length(self) -> str:
        return "length" if self.provider == "openai" else "max_tokens"


@pytest.fixture(scope="module", params=["openai", "anthropic"])
async def rig(
    request: pytest.FixtureRequest, admin_dsn: str, base_env: dict[str, str]
) -> AsyncIterator[Rig]:
    import asyncio

    from tether_testkit import stores

    provider = str(request.param)
    llm: FakeLLM = (FakeOpenAI if provider == "openai" else FakeAnthropic)(api_key=KEY)
    await llm.start()
    dsn = await stores.create_fresh_database(admin_dsn)
    upper = provider.upper()
    proc = await asyncio.to_thread(
        start_runtime,
        {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_MODEL": provider,
            f"TETHER_{upper}_BASE_URL": llm.base_url,
            f"TETHER_{upper}_API_KEY": KEY,
            f"TETHER_{upper}_MODEL": "test-model-1",
            "TETHER_LOG_LEVEL": "DEBUG",
            "TETHER_METRICS_ADDR": f"127.0.0.1:{free_port()}",
        },
        name=f"runtime-{provider}",
    )
    client = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        yield Rig(provider, llm, proc, client, dsn)
    finally:
        await client.close()
        proc.terminate()
        await llm.stop()
        await stores.drop_database(admin_dsn, dsn)
    assert KEY not in proc.log(), "the API key reached a log line"
    assert KEY[6:20] not in proc.log()


def text_of(evs: list[events_pb2.RunEvent]) -> str:
    return "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")


def tool_results(rig: Rig, request_index: int) -> list[str]:
    """The tool results the model was sent, in the provider's own shape."""
    messages = rig.llm.requests[request_index].body["messages"]
    if rig.provider == "openai":
        return [m["content"] for m in messages if m["role"] == "tool"]
    return [
        str(block.get("content"))
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "tool_result"
    ]


RESTART = {"service": "payment-api", "instance_id": "payment-api-2", "env": "prod"}


async def test_a_full_approve_flow(rig: Rig) -> None:
    rig.script(
        Reply(
            text="Let me restart it. ",
            calls=[FakeCall("restart_instance", RESTART)],
            usage=(120, 30),
        ),
        Reply(text=["payment-api-2 ", "was restarted."], usage=(200, 12)),
    )
    run_id, evs = await rig.run("restart payment-api-2 in prod")
    assert types(evs)[-1] == "interrupt", types(evs)
    card = evs[-1].interrupt
    assert card.payload.tool == "restart_instance" and "payment-api-2" in card.payload.target
    await rig.client.resume(run_id, card.interrupt_id)
    evs = await rig.client.events(run_id)
    assert_dense(evs)
    assert types(evs)[-1] == "done", types(evs)
    finished = [e.tool_finished for e in evs if e.WhichOneof("event") == "tool_finished"]
    assert finished and finished[-1].status == events_pb2.TOOL_STATUS_SUCCESS, finished
    assert text_of(evs) == "Let me restart it. payment-api-2 was restarted."
    usage = evs[-1].done.usage
    assert (usage.input_tokens, usage.output_tokens, usage.model_steps) == (320, 42, 2)
    got = await rig.client.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=rig.client.md)
    assert got.run.usage.input_tokens == 320 and got.run.usage.output_tokens == 42
    conn = await asyncpg.connect(rig.dsn)
    try:
        row = await conn.fetchrow(
            "SELECT input_tokens, output_tokens FROM run WHERE id = $1", run_id
        )
    finally:
        await conn.close()
    assert (row["input_tokens"], row["output_tokens"]) == (320, 42), "queryable on the run row"
    # The second request carried the approved call's result back in the provider's shape, the
    # system prompt led with the agent's instructions, and the engine's question tools were
    # offered beside the agent's own.
    (result,) = tool_results(rig, 1)
    assert "restarted" in result.lower() or '"ok": true' in result
    first = rig.llm.requests[0]
    if rig.provider == "openai":
        assert first.header("authorization") == f"Bearer {KEY}"
        assert first.body["stream_options"] == {"include_usage": True}
        assert first.body["messages"][0]["role"] == "system"
        assert "OpsPilot" in first.body["messages"][0]["content"]
        names = {t["function"]["name"] for t in first.body["tools"]}
    else:
        # anthropic's SDK sends the key as a bearer token (older ones: x-api-key)
        assert KEY in (first.header("x-api-key"), (first.header("authorization") or "")[7:])
        system = first.body["system"]
        assert "OpsPilot" in (system if isinstance(system, str) else str(system))
        names = {t["name"] for t in first.body["tools"]}
    assert {"restart_instance", "find_instances", "select_option", "provide_input"} <= names
    assert KEY not in repr(evs) and KEY not in repr(got)


async def test_429_with_retry_after_then_success(rig: Rig) -> None:
    rig.script(
        Reply(status=429, error_message="Rate limit reached", retry_after="2"),
        Reply(text=["All ", "quiet."]),
    )
    started = time.monotonic()
    _, evs = await rig.run("anything wrong?")
    elapsed = time.monotonic() - started
    assert types(evs)[-1] == "done", types(evs)
    assert text_of(evs) == "All quiet."
    assert len(rig.llm.requests) == 2
    assert elapsed >= 2.0, f"Retry-After: 2 was not honoured ({elapsed:.2f} s)"


FULL = "The errors come from the pool, which is exhausted at peak load."


def continuation(body: dict[str, Any]) -> Reply:
    """A model that continues exactly from the answer's start it is given (OpenAI: the last,
    assistant message; Anthropic: the prefill), as a real one would."""
    last = body["messages"][-1]
    prefix = ""
    if last["role"] == "assistant":
        content = last["content"]
        prefix = (
            content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
        )
    assert FULL.startswith(prefix), prefix
    rest = FULL[len(prefix) :]
    return Reply(text=[rest[i : i + 7] for i in range(0, len(rest), 7)])


async def test_a_stream_dropped_mid_step_is_retried_without_duplicate_text(rig: Rig) -> None:
    words = [w + " " for w in FULL.split(" ")]
    words[-1] = words[-1].rstrip()
    rig.script(Reply(text=words, drop_after=6))
    rig.llm.brain = continuation
    try:
        _, evs = await rig.run("why the errors?")
    finally:
        rig.llm.brain = None
    assert types(evs)[-1] == "done", types(evs)
    assert_dense(evs)
    assert len(rig.llm.requests) == 2
    assert text_of(evs) == FULL, text_of(evs)
    # The retry asked the model to continue from what was shown, not to start again.
    last = rig.llm.requests[1].body["messages"][-1]
    assert last["role"] == "assistant", "the retry carried the text already shown"
    content = last["content"]
    shown = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    assert shown.startswith("The errors"), shown


async def test_401_ends_the_run_cleanly_without_a_retry(rig: Rig) -> None:
    rig.script(
        Reply(
            status=401,
            error_type="authentication_error",
            error_message=f"Incorrect API key provided: {KEY}.",
        )
    )
    run_id, evs = await rig.run("hello")
    assert types(evs)[-1] == "error", types(evs)
    err = evs[-1].error
    assert err.code == "MODEL_AUTH_FAILED"
    assert KEY not in err.message and "Traceback" not in err.message
    assert len(rig.llm.requests) == 1
    got = await rig.client.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=rig.client.md)
    assert KEY not in repr(got)


async def test_a_length_limited_answer_is_reported_not_taken_as_complete(rig: Rig) -> None:
    rig.script(Reply(text=["The answer ", "is cut"], stop=rig.stop_reason_length(), usage=(50, 8)))
    run_id, evs = await rig.run("explain everything")
    assert types(evs)[-1] == "error", types(evs)
    assert evs[-1].error.code == "MODEL_OUTPUT_TRUNCATED"
    assert text_of(evs) == "The answer is cut"
    got = await rig.client.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=rig.client.md)
    assert got.run.usage.output_tokens == 8, "a truncated step's tokens are still counted"


async def test_malformed_tool_arguments_go_back_to_the_model(rig: Rig) -> None:
    rig.script(
        Reply(calls=[FakeCall("find_instances", '{"service": "payment-api", "env": ')]),
        Reply(calls=[FakeCall("find_instances", {"service": "payment-api", "env": "prod"})]),
        Reply(text="Found them."),
    )
    _, evs = await rig.run("list payment-api instances")
    assert types(evs)[-1] == "done", types(evs)
    started = [e.tool_started for e in evs if e.WhichOneof("event") == "tool_started"]
    assert len(started) == 1, "the malformed call ran nothing; the corrected one ran once"
    (bad,) = tool_results(rig, 1)
    assert "invalid" in bad and "could not be read" in bad
    assert len(tool_results(rig, 2)) == 2


async def test_a_repeated_provider_call_id_is_its_own_call(rig: Rig) -> None:
    same = "toolu_same" if rig.provider == "anthropic" else "call_same"
    rig.script(
        Reply(calls=[FakeCall("recent_errors", {"service": "payment-api"}, id=same)]),
        Reply(calls=[FakeCall("find_instances", {"service": "payment-api"}, id=same)]),
        Reply(text="Done."),
    )
    _, evs = await rig.run("errors and instances of payment-api")
    assert types(evs)[-1] == "done", types(evs)
    tools = [e.tool_started.tool for e in evs if e.WhichOneof("event") == "tool_started"]
    assert tools == ["recent_errors", "find_instances"], "each call reached its own tool"
    ids = [e.tool_started.call_id for e in evs if e.WhichOneof("event") == "tool_started"]
    assert len(set(ids)) == 2 and same not in ids
    results = tool_results(rig, 2)
    assert len(results) == 2 and results[0] != results[1]


async def test_usage_is_counted_in_the_metrics(rig: Rig) -> None:
    import urllib.request

    rig.script(Reply(text="ok", usage=(11, 3)))
    await rig.run("count me")
    metrics_addr = rig.proc.env.get("TETHER_METRICS_ADDR")
    if not metrics_addr:
        pytest.fail("the rig's runtime serves no metrics")
    body = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=5).read().decode()
    line = next(
        ln
        for ln in body.splitlines()
        if ln.startswith("tether_model_tokens_total{")
        and f'provider="{rig.provider}"' in ln
        and 'direction="input"' in ln
    )
    assert 'model="test-model-1"' in line and 'agent="opspilot"' in line
    assert float(line.rsplit(" ", 1)[1]) >= 11
