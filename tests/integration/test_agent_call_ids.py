"""A model that reuses a tool-call id across the steps of one run. OpenAI-compatible servers that
send no id would get `call_{index}` from a naive client, so every step's first
call is `call_0`; a scripted policy may also name its own ids. Each call must still be its own
call: the second must reach its own tool (here: a card for a write), never be answered with the
stored result of an earlier, different call that happened to have the same id."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from tether.runtime.v1 import resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

REUSER = """
import json
import os

from tether_sdk import Agent, ModelRequest, ScriptedModel, ToolCall, ToolContext, tool


def record(tool: str, n: int) -> None:
    with open(os.environ["REUSER_CALLS"], "a") as f:
        f.write(json.dumps({"tool": tool, "n": n}) + "\\n")


@tool(effect="read")
async def count(ctx: ToolContext, n: int) -> str:
    \"\"\"Count to n.\"\"\"
    record("count", n)
    return f"counted to {n}"


@tool(effect="write", action="probe.store", scope="probe", idempotent_by_key=True)
async def store(ctx: ToolContext, n: int) -> str:
    \"\"\"Store a number.\"\"\"
    record("store", n)
    return f"stored {n}"


def policy(request: ModelRequest):
    done = request.results()
    if not done:
        return ToolCall("count", {"n": 1}, "call_0")
    if len(done) == 1:
        return ToolCall("store", {"n": 2}, "call_0")  # the same id, another call
    return " | ".join(f"{r.tool}={r.outcome}: {r.summary}" for r in done)


agent = Agent(
    name="reuser",
    description="Reuses call ids, as some OpenAI-compatible servers do.",
    instructions="-",
    model=ScriptedModel(policy),
    tools=[count, store],
)
"""


@pytest.fixture
def reuser(admin_dsn: str, base_env: dict[str, str], tmp_path: Path) -> Iterator[Proc]:
    write_package(tmp_path, "reuser_pkg", REUSER)
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    env = env_with_path(
        {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_AGENTS": "reuser_pkg:agent",
            "REUSER_CALLS": str(tmp_path / "calls.jsonl"),
        },
        tmp_path,
    )

    async def grant() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                "INSERT INTO \"grant\" (user_id, action, scope) VALUES ('alice', 'probe.store', "
                "'probe')"
            )
        finally:
            await conn.close()

    asyncio.run(grant())
    proc = start_runtime(env, name="runtime-reuser")
    yield proc
    proc.terminate()
    asyncio.run(stores.drop_database(admin_dsn, dsn))


async def test_a_reused_call_id_is_a_new_call_not_the_old_result(
    reuser: Proc, tmp_path: Path
) -> None:
    alice = Client(reuser.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await alice.conversation()
        run = await alice.stub.StartRun(
            pb.StartRunRequest(conversation_id=conv, text="go", agent="reuser"),
            metadata=alice.md,
            timeout=10,
        )
        evs = await alice.events(run.run.id, until="interrupt", timeout=20)
    finally:
        await alice.close()
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert calls == [{"tool": "count", "n": 1}]
    answer = "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")
    # The write was proposed to a person, not answered with count's result.
    assert answer == "", f"the store call was answered without running: {answer!r}"
    assert types(evs)[-1] == "interrupt"
    card = evs[-1].interrupt
    assert card.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
    assert (card.payload.tool, card.payload.parameter_summary) == ("store", "n=2")
