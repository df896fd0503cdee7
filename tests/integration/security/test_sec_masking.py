"""Each secret format a deployment meets first (issue 16, finding 3) is masked wherever a run shows
it: in the events (a read tool's progress and summary, a tool's error message, a write tool's
card, the model's `reason` on it), in the stored messages the model reads back (tool data), and in
the runtime's log. A tool value that a text-level JSON redaction corrupted (`redis://h\\"x`) now
reaches the model intact in shape and does not fail the run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether.runtime.v1.events_pb2 import RunEvent
from tether_testkit import stores
from tether_testkit.agent_packages import env_with_path, write_package
from tether_testkit.client import Client, token, types
from tether_testkit.processes import Proc, start_runtime
from tether_testkit.secrets import TEST_SECRET

PEM_BODY = ["MIIEowIBAAKCAQEAq7Bz9XvN2mK4pL8sR1tY6uW3", "eF0gH5jK7lM9nP2qS4vX8zA1cD3fG6hJ9kL2mN5p"]
PEM = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *PEM_BODY, "-----END RSA PRIVATE KEY-----"])
# (what the tool says, the secret part that must never be seen, what stays readable)
FORMATS: dict[str, tuple[str, str, str]] = {
    "db_password": ("db_password=Hx7-pr0d-Zq91", "Hx7-pr0d-Zq91", "db_password=***"),
    "client_secret": ("client_secret: cs9f8e7d6c5b4a3928", "cs9f8e7d6c5b4a3928", "client_secret"),
    "aws": (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_SECRET_ACCESS_KEY=***",
    ),
    "github_env": ("GITHUB_TOKEN=gt5a4b3c2d1e0f9a8b", "gt5a4b3c2d1e0f9a8b", "GITHUB_TOKEN=***"),
    "github_pat": (
        "push with ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
        "push with",
    ),
    "stripe": (
        "charge via sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "4eC39HqLyjWDarjtT1zdp7dc",
        "charge via",
    ),
    "basic_auth": (
        "Authorization: Basic dXNlcjpzM2NyZXQtcGFzcw==",
        "dXNlcjpzM2NyZXQtcGFzcw",
        "Authorization: Basic ***",
    ),
    "pem": (f"deploy key:\n{PEM}", PEM_BODY[0], "BEGIN RSA PRIVATE KEY"),
    "slack_webhook": (
        "alert https://hooks.slack.com/services/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",
        "Zx81kQ2LmP0aB7cD9eF3gH4j",
        "alert",
    ),
}
SAYS = {name: f[0] for name, f in FORMATS.items()}
ODD = 'redis://h\\"x'  # a backslash and a quote: text-level JSON redaction broke on it

AGENT = f"""
import json

from tether_sdk import (
    Agent, Confirmation, ModelRequest, ScriptedModel, ToolCall, ToolContext, ToolError,
    ToolResult, tool,
)

SAYS = json.loads({json.dumps(json.dumps(SAYS))})
ODD = {ODD!r}


@tool(effect="read")
async def read_config(ctx: ToolContext) -> ToolResult:
    \"\"\"Read the service's configuration (which is full of secrets).\"\"\"
    for name, text in SAYS.items():
        await ctx.progress(0.5, text)
        ctx.logger.warning("config line %s: %s", name, text)
    lines = " | ".join(SAYS.values())
    return ToolResult(
        summary="config: " + lines,
        data={{"lines": list(SAYS.values()), "by_name": SAYS, "nested": [{{"raw": lines}}]}},
    )


@tool(effect="read")
async def login(ctx: ToolContext) -> ToolResult:
    \"\"\"Log in (and fail, quoting what was tried).\"\"\"
    raise ToolError("login refused for " + " | ".join(SAYS.values()))


@tool(effect="write", action="leak.rotate", scope="leak", idempotent_by_key=True)
async def rotate(ctx: ToolContext, reason: str) -> str:
    \"\"\"Rotate the credentials.\"\"\"
    return "rotated"


@rotate.confirmation
async def _card(ctx: ToolContext, reason: str) -> Confirmation:
    lines = " | ".join(SAYS.values())
    return Confirmation(
        title="Rotate " + SAYS["stripe"],
        target="svc " + SAYS["github_pat"],
        summary="rotate " + lines,
        risk="high",
        details=lines,
        preview="\\n".join(SAYS.values()),
    )


@tool(effect="read")
async def read_odd(ctx: ToolContext) -> ToolResult:
    \"\"\"A log line with a backslash and a quote in a URL.\"\"\"
    return ToolResult(summary="one odd line", data={{"line": ODD, "n": 7, "flag": True}})


def policy(request: ModelRequest):
    done = request.results()
    if request.last_user_text().startswith("odd"):
        if not done:
            return ToolCall("read_odd", {{}})
        return "odd: " + done[0].outcome
    if not done:
        return ToolCall("read_config", {{}})
    if len(done) == 1:
        return ToolCall("login", {{}})
    return ToolCall("rotate", {{"reason": "the model says: " + SAYS["aws"] + " " + SAYS["db_password"]}})


agent = Agent(
    name="leaker",
    description="Reads and writes secrets, to prove they are masked.",
    instructions="-",
    model=ScriptedModel(policy),
    tools=[read_config, login, rotate, read_odd],
)
"""


@pytest.fixture(scope="module")
def leaker(
    admin_dsn: str, base_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Proc, str]]:
    tmp = tmp_path_factory.mktemp("leaker")
    write_package(tmp, "leaker_pkg", AGENT)
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    env = env_with_path({**base_env, "DATABASE_URL": dsn, "TETHER_AGENTS": "leaker_pkg:agent"}, tmp)

    async def grant() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                "INSERT INTO \"grant\" (user_id, action, scope) VALUES ('alice', 'leak.rotate', "
                "'leak')"
            )
        finally:
            await conn.close()

    asyncio.run(grant())
    proc = start_runtime(env, name="runtime-leaker")
    yield proc, dsn
    proc.terminate()
    asyncio.run(stores.drop_database(admin_dsn, dsn))


async def _tool_messages(dsn: str, conv: str) -> list[dict[str, Any]]:
    """What the model reads back: the tool results in the run's checkpoint, oldest first."""
    conn = await asyncpg.connect(dsn)
    try:
        checkpoint = await conn.fetchval(
            "SELECT checkpoint::text FROM run WHERE conversation_id = $1", conv
        )
    finally:
        await conn.close()
    messages = json.loads(checkpoint)["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


async def _run(
    proc: Proc, dsn: str, text: str, until: str | None
) -> tuple[list[RunEvent], str, list[dict[str, Any]]]:
    alice = Client(proc.addr, token(TEST_SECRET, "alice"))
    try:
        conv = await alice.conversation()
        run = await alice.stub.StartRun(
            pb.StartRunRequest(conversation_id=conv, text=text, agent="leaker"),
            metadata=alice.md,
            timeout=10,
        )
        evs = await alice.events(run.run.id, until=until, timeout=30)
        msgs = await alice.stub.ListMessages(
            pb.ListMessagesRequest(conversation_id=conv), metadata=alice.md, timeout=10
        )
    finally:
        await alice.close()
    return evs, str(msgs), await _tool_messages(dsn, conv)


def _leaks(text: str) -> list[str]:
    return [name for name, (_, secret, _) in FORMATS.items() if secret in text]


async def test_each_secret_format_is_masked_in_events_cards_messages_and_logs(
    leaker: tuple[Proc, str],
) -> None:
    proc, dsn = leaker
    evs, messages, tools = await _run(proc, dsn, "leak", until="interrupt")
    kinds = types(evs)
    assert kinds[-1] == "interrupt", kinds
    progress = "\n".join(e.tool_progress.text for e in evs if e.HasField("tool_progress"))
    finished = [e.tool_finished for e in evs if e.HasField("tool_finished")]
    card = evs[-1].interrupt.payload
    card_text = "\n".join(
        [card.title, card.target, card.parameter_summary, card.reason, card.details, card.preview]
    )
    assert len(finished) == 2 and progress and card.reason, (kinds, card)
    where = {
        "progress events": progress,
        "read_config's summary": finished[0].summary,
        "login's error message": finished[1].summary,
        "the card": card_text,
        "the card's reason (model text)": card.reason,
        "every event": "\n".join(str(e) for e in evs),
        "ListMessages": messages,
        "the tool results the model reads (data)": json.dumps(tools),
    }
    for place, text in where.items():
        assert _leaks(text) == [], f"unmasked in {place}: {_leaks(text)}\n{text}"
    # Masked, not dropped: each format is still there with its secret part replaced.
    for name, (_, _, kept) in FORMATS.items():
        assert kept in finished[0].summary, (name, finished[0].summary)
        assert kept in card.details, (name, card.details)
    assert "db_password=***" in card.reason and "AWS_SECRET_ACCESS_KEY=***" in card.reason
    data = tools[0]["data"]
    assert data["lines"][0] == "db_password=***", data  # the secret part only
    assert data["by_name"]["db_password"] == "***", data  # a secret-named key: the whole value
    log = proc.log()
    assert "config line slack_webhook" in log, "the tool's log lines never arrived"
    assert _leaks(log) == [], f"unmasked in the runtime's log: {_leaks(log)}"


async def test_a_quote_after_a_backslash_in_tool_data_neither_corrupts_nor_fails_the_run(
    leaker: tuple[Proc, str],
) -> None:
    proc, dsn = leaker
    evs, _, tools = await _run(proc, dsn, "odd", until=None)
    assert types(evs)[-1] == "done", [str(e)[:300] for e in evs]
    finished = [e.tool_finished for e in evs if e.HasField("tool_finished")]
    assert finished and finished[0].summary == "one odd line"
    answer = "".join(e.text_delta.delta for e in evs if e.HasField("text_delta"))
    assert answer == "odd: ok", answer
    # The model got the data back as the same structure: the URL masked, the rest as it was.
    assert tools[0]["data"] == {"line": 'redis://***"x', "n": 7, "flag": True}, tools
