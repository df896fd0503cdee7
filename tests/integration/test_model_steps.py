"""The engine's side of a model step, whatever the model: a transient failure mid-answer is
retried without showing text twice (a deterministic model: skipped by length; a provider: asked
to continue, even by the runtime that takes the run over after a kill -9); a model that cannot
be reached fails the run with MODEL_UNAVAILABLE instead of passing for a store outage; and a run
past its token limit stops with TOKEN_LIMIT_EXCEEDED."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.fake_llm import Reply
from tether_testkit.fake_openai import FakeOpenAI
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

STEPPERS = """
import os

from tether_sdk import Agent, Limits, ModelError, ScriptedModel, ToolCall, ToolContext, tool
from tether_sdk import Usage


class Flaky:
    \"\"\"Deterministic, like every non-provider model must be: the first attempt breaks after
    two words (a 503), the second answers in full.\"\"\"

    async def stream(self, request):
        path = os.environ["STEPPER_ATTEMPTS"]
        with open(path, "a") as f:
            f.write("x")
        first = len(open(path).read()) == 1
        for word in ["one ", "two ", "three ", "four"]:
            yield word
            if first and word == "two ":
                raise ModelError("MODEL_UNAVAILABLE", "503 from upstream", retryable=True,
                                 retry_after_s=0.05)
        yield Usage(5, 4)


class Unreachable:
    async def stream(self, request):
        raise ConnectionRefusedError(111, "Connection refused")
        yield ""  # an async generator


@tool(effect="read")
async def look(ctx: ToolContext, what: str) -> str:
    \"\"\"Look at something.\"\"\"
    return f"looked at {what}"


def spend(request):
    if not request.results():
        return ToolCall("look", {"what": "x" * 400})
    return "never reached: the limit stops the run first"


fast = Limits(model_retries=2, model_backoff_s=0.05, model_backoff_max_s=0.1)
flaky = Agent(name="flaky", description="-", instructions="-", model=Flaky(), limits=fast)
unreachable = Agent(
    name="unreachable", description="-", instructions="-", model=Unreachable(), limits=fast
)
spender = Agent(
    name="spender", description="-", instructions="i" * 200, model=ScriptedModel(spend),
    tools=[look], limits=Limits(max_run_tokens=60),
)
"""


@pytest.fixture(scope="module")
def steppers(
    admin_dsn: str, base_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, Path]]:
    root = tmp_path_factory.mktemp("steppers")
    write_package(root, "stepper_pkg", STEPPERS)
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    env = env_with_path(
        {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_AGENTS": "stepper_pkg:flaky,stepper_pkg:unreachable,stepper_pkg:spender",
            "TETHER_AGENT_ENTRY_POINTS": "0",
            "STEPPER_ATTEMPTS": str(root / "attempts"),
        },
        root,
    )
    proc = start_runtime(env, name="runtime-steppers")
    yield proc, root
    proc.terminate()
    asyncio.run(stores.drop_database(admin_dsn, dsn))


async def _run(proc: Proc, agent: str) -> tuple[str, list[Any], Client]:
    alice = Client(proc.addr, token(TEST_SECRET, "alice"))
    conv = await alice.conversation()
    run = await alice.stub.StartRun(
        pb.StartRunRequest(conversation_id=conv, text="go", agent=agent),
        metadata=alice.md,
        timeout=10,
    )
    return run.run.id, await alice.events(run.run.id, timeout=30), alice


def _text(evs: list[Any]) -> str:
    return "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")


async def test_a_deterministic_models_retried_step_shows_its_text_once(steppers) -> None:
    proc, root = steppers
    _, evs, alice = await _run(proc, "flaky")
    await alice.close()
    assert types(evs)[-1] == "done", types(evs)
    assert_dense(evs)
    assert _text(evs) == "one two three four"
    assert (root / "attempts").read_text() == "xx"
    assert evs[-1].done.usage.output_tokens == 4


async def test_an_unreachable_model_fails_the_run_not_the_store(steppers) -> None:
    proc, _ = steppers
    run_id, evs, alice = await _run(proc, "unreachable")
    got = await alice.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=alice.md)
    await alice.close()
    assert types(evs) == ["run_started", "error"], types(evs)
    assert evs[-1].error.code == "MODEL_UNAVAILABLE"
    assert "after 2 retries" in evs[-1].error.message
    assert "Traceback" not in evs[-1].error.message
    assert got.run.status == resources_pb2.RUN_STATUS_FAILED
    # Before model errors were told apart, the OSError passed for a store outage: the run was
    # handed back and claimed again, over and over.
    assert "run interrupted by a store failure" not in proc.log()


async def test_a_run_past_its_token_limit_stops(steppers) -> None:
    proc, _ = steppers
    run_id, evs, alice = await _run(proc, "spender")
    got = await alice.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=alice.md)
    await alice.close()
    assert types(evs)[-1] == "error", types(evs)
    assert evs[-1].error.code == "TOKEN_LIMIT_EXCEEDED"
    assert "limit of 60" in evs[-1].error.message
    assert "tool_finished" in types(evs), "the first step's tool ran; the second step never did"
    assert got.run.usage.input_tokens + got.run.usage.output_tokens > 60
    assert got.run.usage.model_steps == 1


FULL = "Payment errors rose because the connection pool is exhausted at peak load."


def _continue(body: dict[str, Any]) -> Reply:
    """A provider model continuing exactly from the answer's start it is given."""
    last = body["messages"][-1]
    prefix = str(last["content"]) if last["role"] == "assistant" else ""
    assert FULL.startswith(prefix), prefix
    rest = FULL[len(prefix) :]
    return Reply(text=[rest[i : i + 6] for i in range(0, len(rest), 6)])


async def test_after_a_kill_mid_answer_a_provider_continues_from_the_text_shown(
    private_env: dict[str, str],
) -> None:
    """Runtime A streams half an answer from a provider and is killed; runtime B takes the run
    over. A provider would not repeat the same words, so skipping the repeat by length would
    garble the text: B reads what was shown from the event log and asks to continue it."""
    words = [w + " " for w in FULL.split(" ")]
    words[-1] = words[-1].rstrip()
    async with FakeOpenAI([Reply(text=words, delay_s=0.25)], brain=_continue) as llm:
        env = {
            **private_env,
            "TETHER_MODEL": "openai",
            "TETHER_OPENAI_BASE_URL": llm.base_url,
            "TETHER_OPENAI_API_KEY": "sk-crash-test-0123456789abcdef",
            "TETHER_COALESCE_MS": "0",
        }
        a = await asyncio.to_thread(start_runtime, env, name="runtime-a")
        alice = Client(a.addr, token(TEST_SECRET, "alice"))
        try:
            conv = await alice.conversation()
            run = (await alice.start(conv, "why do payments fail?")).run
            shown: list[Any] = []
            while sum(e.WhichOneof("event") == "text_delta" for e in shown) < 3:
                after = shown[-1].sequence if shown else 0
                shown += await alice.events(run.id, after, until="text_delta", timeout=20)
            a.kill()
            a.popen.wait(10)
            await alice.close()
            b = await asyncio.to_thread(start_runtime, env, name="runtime-b")
            bob = Client(b.addr, token(TEST_SECRET, "alice"))
            try:
                evs = await bob.events(run.id, timeout=40)
            finally:
                await bob.close()
                b.terminate()
        finally:
            a.kill()
    assert types(evs)[-1] == "done", types(evs)
    assert_dense(evs)
    assert _text(evs) == FULL, _text(evs)
    # The taking-over runtime's request carried exactly what A had shown, as the answer's start.
    retry = llm.requests[-1].body["messages"][-1]
    assert retry["role"] == "assistant" and FULL.startswith(retry["content"])
    assert len(retry["content"]) >= len("Payment errors rose ")
