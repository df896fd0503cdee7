"""A 200-turn conversation through a real runtime within a small token budget: every step the
model is sent fits the budget; early turns leave the verbatim window and reach later steps only
through the summary the model itself wrote in the background (stored on the conversation, shown
as unconfirmed); long tool work inside a run is compacted rather than sent whole."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from tether_runtime.engine.agent.context import SUMMARY_LABEL
from tether_runtime.engine.agent.tokens import ESTIMATE
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

BUDGET = 1500
TURNS = 200
CODENAME = "ALPHA-ZEBRA-1"

AGENT = f"""
import json
import os
import re
from dataclasses import asdict

from tether_sdk import Agent, Limits, ModelRequest, ToolCall, ToolContext, ToolResult, Usage, tool

CODENAMES = re.compile(r"\\b[A-Z]+-[A-Z]+-\\d+\\b")


def log(entry: dict) -> None:
    with open(os.environ["CTX_REQUESTS"], "a") as f:
        f.write(json.dumps(entry) + "\\n")


@tool(effect="read")
async def lookup(ctx: ToolContext, n: int) -> ToolResult:
    \"\"\"Look up a page of records.\"\"\"
    return ToolResult(summary=f"page {{n}} of records", data={{"rows": "r" * 1200}})


class Recorder:
    \"\"\"Records every request; summarises by keeping the codenames; digs with three lookups.\"\"\"

    async def stream(self, request: ModelRequest):
        log(
            {{
                "purpose": request.purpose,
                "instructions": request.instructions,
                "context": request.context,
                "messages": request.messages,
                "tools": [asdict(t) for t in request.tools],
            }}
        )
        yield Usage(input_tokens=1)
        if request.purpose == "summary":
            seen = []
            texts = [request.context] + [str(m.get("content") or "") for m in request.messages]
            for name in CODENAMES.findall(" ".join(texts)):
                if name not in seen:
                    seen.append(name)
            turns = sum(1 for m in request.messages if m["role"] == "user")
            text = f"Codenames so far: {{', '.join(seen) or 'none'}}. Folded {{turns}} more turns."
            log({{"purpose": "summary_answer", "text": text}})
            yield text
            return
        asked = request.last_user_text()
        done = request.results()
        if asked.startswith("dig") and len(done) < 3:
            yield ToolCall("lookup", {{"n": len(done) + 1}})
            return
        yield "Noted: " + asked[:40]
        yield Usage(output_tokens=5)


agent = Agent(
    name="ctxbudget",
    description="Counts its context.",
    instructions="Answer in one short line.",
    model=Recorder(),
    tools=[lookup],
    limits=Limits(context_tokens={BUDGET}),
)
"""


@pytest.fixture
def runtime_with_budget(
    admin_dsn: str, base_env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[Proc, str]]:
    write_package(tmp_path, "ctxbudget_pkg", AGENT)
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    env = env_with_path(
        {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_AGENTS": "ctxbudget_pkg:agent",
            "TETHER_SCRIPTED_DELAY_S": "0",
            "CTX_REQUESTS": str(tmp_path / "requests.jsonl"),
        },
        tmp_path,
    )
    proc = start_runtime(env, name="runtime-ctxbudget")
    yield proc, dsn
    proc.terminate()
    asyncio.run(stores.drop_database(admin_dsn, dsn))


def turn_text(n: int) -> str:
    if n == 1:
        return f"Remember the codename {CODENAME} for the vault."
    if n % 40 == 0:
        return f"dig through the records for turn {n}"
    return f"turn {n}: a short remark about topic {n}."


def step_tokens(r: dict) -> int:
    """What a step sent, counted as the engine counts for a scripted/custom model."""
    tools = json.dumps(r["tools"], default=str) if r["tools"] else ""
    return (
        ESTIMATE.count(r["instructions"])
        + ESTIMATE.count(tools)
        + ESTIMATE.count(r["context"])
        + ESTIMATE.count_messages(r["messages"])
    )


async def test_a_long_conversation_stays_within_the_budget_and_remembers_through_the_summary(
    runtime_with_budget: tuple[Proc, str], tmp_path: Path
) -> None:
    proc, dsn = runtime_with_budget
    alice = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await alice.conversation()
        for n in range(1, TURNS + 1):
            run = (await alice.start(conv, turn_text(n), agent="ctxbudget")).run
            evs = await alice.events(run.id, timeout=20)
            assert types(evs)[-1] == "done", f"turn {n}: {types(evs)}"
    finally:
        await alice.close()

    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["purpose"] == "step"]
    summaries = [r for r in records if r["purpose"] == "summary"]
    answers = [r["text"] for r in records if r["purpose"] == "summary_answer"]
    assert len(steps) == TURNS + 3 * (TURNS // 40)

    # Every step fits the budget.
    over = [(i, step_tokens(r)) for i, r in enumerate(steps) if step_tokens(r) > BUDGET]
    assert not over, f"steps over the {BUDGET}-token budget: {over[:5]}"

    # The model wrote the summary (no tools offered), folding the turn that named the codename.
    assert summaries and all(r["tools"] == [] for r in summaries)
    assert any(CODENAME in json.dumps(r["messages"]) for r in summaries)
    assert answers and all(CODENAME in a for a in answers)

    # Late steps: the codename is no longer in the verbatim turns, only in the summary, which
    # is labelled as the model's, not as a fact.
    late = steps[-50:]
    for r in late:
        assert CODENAME not in json.dumps(r["messages"])
        assert f"{SUMMARY_LABEL}: Codenames so far: {CODENAME}" in r["context"]
    # Recent turns are there verbatim.
    assert any(
        m["content"] == turn_text(TURNS - 1) for m in steps[-1]["messages"] if m["role"] == "user"
    )

    # A dig's last step had its oldest lookup compacted, the newest ones whole.
    dig_last = [r for r in steps if len([m for m in r["messages"] if m["role"] == "tool"]) == 3]
    assert dig_last
    for r in dig_last:
        bodies = [json.loads(m["content"]) for m in r["messages"] if m["role"] == "tool"]
        assert bodies[0] == {
            "ok": True,
            "outcome": "ok",
            "summary": "page 1 of records",
            "compacted": True,
        }
        assert [b.get("compacted", False) for b in bodies[1:]] == [False, False]
        assert "rows" in bodies[2]["data"]

    # Stored on the conversation: one of the model's summaries, with its cursor; facts untouched.
    conn = await asyncpg.connect(dsn)
    try:
        row = None
        for _ in range(50):  # a summary may still be under way after the last run
            row = await conn.fetchrow(
                "SELECT summary, summary_through, facts::text AS facts FROM conversation "
                "WHERE id = $1",
                conv,
            )
            assert row is not None
            if row["summary"] == answers[-1]:
                break
            await asyncio.sleep(0.1)
            records = [
                json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()
            ]
            answers = [r["text"] for r in records if r["purpose"] == "summary_answer"]
    finally:
        await conn.close()
    assert row is not None
    assert row["summary"] == answers[-1]
    assert row["summary_through"].startswith("msg_")
    assert json.loads(row["facts"]) == {}
    assert CODENAME not in row["facts"]
