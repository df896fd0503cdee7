"""Agents from the user's own package (DESIGN section 10), on real runtime processes with real
Postgres and Redis: loaded from outside the source tree by TETHER_AGENTS and by entry point, their
migrations applied by `tether migrate`; an unknown agent is AGENT_NOT_FOUND over gRPC and HTTP; a
tool without an effect stops the runtime at start; invalid arguments reach neither the tool nor a
card; scopes are exact; tool timeouts; and the README's agent, pasted into a package and run."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import grpc
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_testkit import stores
from tether_testkit.agent_packages import declare_entry_point, env_with_path, write_package
from tether_testkit.client import Client, assert_dense, reason, token, types
from tether_testkit.processes import (
    Proc,
    free_port,
    run_module,
    start_gateway,
    start_runtime,
    tether_cli,
)
from tether_testkit.secrets import TEST_SECRET

ROOT = Path(__file__).resolve().parents[2]
APPROVE = events_pb2.DECISION_APPROVED
OUTCOME_UNKNOWN = resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN
CONFIRM_ACTION = resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION

# -- the agents -------------------------------------------------------------------------------

ECHOER = """
from contextlib import asynccontextmanager

import asyncpg
from tether_sdk import Agent, Host, ModelRequest, ScriptedModel, ToolCall, ToolContext, tool


@asynccontextmanager
async def database(host: Host):
    yield host.database_url


@tool(effect="read")
async def heard(ctx: ToolContext, text: str) -> str:
    \"\"\"How often a text was echoed.\"\"\"
    conn = await asyncpg.connect(ctx.state)
    try:
        n = await conn.fetchval("SELECT count(*) FROM echoer_echo WHERE text = $1", text)
    finally:
        await conn.close()
    return f"echoed {n} times so far"


@tool(effect="write", action="echo.say", scope="echo/{text}", idempotent_by_key=True)
async def say(ctx: ToolContext, text: str) -> str:
    \"\"\"Echo a text, once per idempotency key.\"\"\"
    conn = await asyncpg.connect(ctx.state)
    try:
        await conn.execute(
            "INSERT INTO echoer_echo (key, text) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            ctx.idempotency_key,
            text,
        )
    finally:
        await conn.close()
    return f"echoed {text}"


def policy(request: ModelRequest):
    done = request.results()
    text = request.last_user_text()
    if not done:
        return ToolCall("heard", {"text": text})
    if len(done) == 1:
        return ToolCall("say", {"text": text})
    return "Echo: " + " / ".join(r.summary for r in done)


agent = Agent(
    name="echoer",
    description="Echoes what it is told, once.",
    instructions="Echo the user.",
    model=ScriptedModel(policy),
    tools=[heard, say],
    migrations="echoer_pkg:migrations",
    lifespan=database,
)
"""

ECHOER_MIGRATIONS = {
    "0001_echo.sql": """
        CREATE TABLE echoer_echo (
            key        text PRIMARY KEY,
            text       text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
    """
}

# Every call of a probe tool is a line in $PROBE_CALLS: what reached the tool, and nothing else.
PROBE = """
import asyncio
import json
import os
from typing import Literal

from tether_sdk import Agent, Limits, ModelRequest, ScriptedModel, ToolCall, ToolContext, tool


def record(tool: str, ctx: ToolContext, **args) -> None:
    with open(os.environ["PROBE_CALLS"], "a") as f:
        line = {"tool": tool, "run": ctx.run_id, "attempt": ctx.attempt, **args}
        f.write(json.dumps(line) + "\\n")


@tool(effect="read")
async def count(ctx: ToolContext, n: int) -> str:
    \"\"\"Count to n.\"\"\"
    record("count", ctx, n=n)
    await ctx.progress(0.5, f"half way to {n}, password=hunter2")
    return f"counted to {n}"


@tool(effect="write", action="probe.store", scope="probe", idempotent_by_key=True)
async def store(ctx: ToolContext, n: int) -> str:
    \"\"\"Store a number.\"\"\"
    record("store", ctx, n=n)
    return f"stored {n}"


@tool(effect="write", action="service.deploy", scope="{service}/{env}", idempotent_by_key=True)
async def deploy(ctx: ToolContext, service: str, env: Literal["prod", "staging"]) -> str:
    \"\"\"Deploy a service.\"\"\"
    record("deploy", ctx, service=service, env=env)
    return f"deployed {service} to {env}"


@tool(effect="read", timeout_s=0.3)
async def slow_read(ctx: ToolContext, seconds: float) -> str:
    \"\"\"A lookup that hangs.\"\"\"
    record("slow_read", ctx, seconds=seconds)
    await asyncio.sleep(seconds)
    return "read"


@tool(effect="write", action="probe.slow", scope="probe", timeout_s=0.3)
async def slow_write(ctx: ToolContext, seconds: float) -> str:
    \"\"\"A change that hangs; the external system knows no idempotency key.\"\"\"
    record("slow_write", ctx, seconds=seconds)
    await asyncio.sleep(seconds)
    return "written"


SCRIPTS = {
    "invalid": [
        ToolCall("store", {"n": "three"}),
        ToolCall("count", {"m": 1}),
        ToolCall("store", {"n": 3}),
    ],
    "count": [ToolCall("count", {"n": 2})],
    "deploy staging": [ToolCall("deploy", {"service": "payment-api", "env": "staging"})],
    "deploy prod": [ToolCall("deploy", {"service": "payment-api", "env": "prod"})],
    "slow read": [ToolCall("slow_read", {"seconds": 5})],
    "slow write": [ToolCall("slow_write", {"seconds": 5})],
}


def policy(request: ModelRequest):
    script = SCRIPTS[request.last_user_text()]
    done = request.results()
    if len(done) < len(script):
        return script[len(done)]
    return " | ".join(f"{r.tool}={r.outcome}: {r.summary}" for r in done)


agent = Agent(
    name="probe",
    description="Calls its tools as its script says.",
    instructions="Follow the script.",
    model=ScriptedModel(policy),
    tools=[count, store, deploy, slow_read, slow_write],
    limits=Limits(tool_timeout_s=5, tool_retries=2, retry_backoff_s=0.05),
)
"""

CARELESS = """
from tether_sdk import Agent, ScriptedModel, tool


@tool
async def wipe_disk(device: str) -> str:
    \"\"\"Wipe a disk.\"\"\"
    return "wiped"


agent = Agent("careless", "No effect declared.", "i", ScriptedModel(lambda r: "ok"), [wipe_disk])
"""

# -- helpers ----------------------------------------------------------------------------------


@dataclass
class Deployment:
    """A runtime on a database of its own, with an agent package on its PYTHONPATH."""

    runtime: Proc
    dsn: str
    root: Path


async def _grant(dsn: str, rows: list[tuple[str, str, str]]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.executemany(
            'INSERT INTO "grant" (user_id, action, scope) VALUES ($1, $2, $3)', rows
        )
    finally:
        await conn.close()


async def _start(c: Client, text: str, agent: str) -> str:
    conv = await c.conversation()
    resp = await c.stub.StartRun(
        pb.StartRunRequest(conversation_id=conv, text=text, agent=agent),
        metadata=c.md,
        timeout=10,
    )
    assert resp.run.agent == agent
    return str(resp.run.id)


async def _run_row(dsn: str, run_id: str) -> tuple[str, dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT status, checkpoint FROM run WHERE id = $1", run_id)
    finally:
        await conn.close()
    assert row is not None
    return str(row["status"]), json.loads(row["checkpoint"])


def _tool_messages(checkpoint: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": m["name"], **json.loads(m["content"])}
        for m in checkpoint["messages"]
        if m["role"] == "tool"
    ]


def _answer(evs: list[events_pb2.RunEvent]) -> str:
    return "".join(e.text_delta.delta for e in evs if e.WhichOneof("event") == "text_delta")


def _calls(path: Path, run_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [c for c in lines if c["run"] == run_id]


@pytest.fixture
async def alice_of():
    """A gRPC client as alice for a given runtime; closed after the test."""
    made: list[Client] = []

    def make(proc: Proc) -> Client:
        c = Client(proc.addr, token(TEST_SECRET, "alice"))
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


@pytest.fixture
def fresh_dsn(admin_dsn: str) -> Iterator[str]:
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    yield dsn
    asyncio.run(stores.drop_database(admin_dsn, dsn))


# -- an agent from outside the source tree ------------------------------------------------------


@pytest.mark.parametrize("how", ["TETHER_AGENTS", "entry point"])
async def test_an_agent_from_a_package_outside_the_source_tree(
    how: str, tmp_path: Path, base_env: dict[str, str], fresh_dsn: str, alice_of
) -> None:
    write_package(tmp_path, "echoer_pkg", ECHOER, migrations=ECHOER_MIGRATIONS)
    env = {**base_env, "DATABASE_URL": fresh_dsn}
    if how == "TETHER_AGENTS":
        env["TETHER_AGENTS"] = "echoer_pkg:agent"
        source = "TETHER_AGENTS=echoer_pkg:agent"
    else:
        declare_entry_point(tmp_path, "echoer-agent", "echoer", "echoer_pkg:agent")
        env["TETHER_AGENTS"] = ""
        source = "entry point echoer = echoer_pkg:agent"
    env = env_with_path(env, tmp_path)

    # The test database knows only the default agents; `tether migrate` applies the echoer's
    # own migrations after Tether's, once.
    conn = await asyncpg.connect(fresh_dsn)
    try:
        assert await conn.fetchval("SELECT to_regclass('echoer_echo')") is None
        for _ in range(2):
            out = tether_cli("migrate", env=env)
            assert out.returncode == 0, out.stderr
        rows = await conn.fetch("SELECT version, name FROM agent_migration WHERE agent = 'echoer'")
        assert [tuple(r) for r in rows] == [(1, "0001_echo.sql")]
        assert await conn.fetchval("SELECT to_regclass('echoer_echo')") == "echoer_echo"
    finally:
        await conn.close()
    listing = tether_cli("agents", env=env)
    assert listing.returncode == 0, listing.stderr
    assert f"echoer\n  from: {source}\n" in listing.stdout

    text = "hello tether"
    await _grant(fresh_dsn, [("alice", "echo.say", f"echo/{text}")])
    runtime = start_runtime(env, name=f"runtime-echoer-{how.replace(' ', '-')}")
    try:
        alice = alice_of(runtime)
        agents = await alice.stub.ListAgents(pb.ListAgentsRequest(), metadata=alice.md, timeout=10)
        assert sorted(a.name for a in agents.agents) == ["echoer", "opspilot"]
        run_id = await _start(alice, text, "echoer")
        evs = await alice.events(run_id, until="interrupt")
        card = evs[-1].interrupt
        assert card.kind == CONFIRM_ACTION
        assert (card.payload.tool, card.payload.target) == ("say", f"echo/{text}")
        await alice.resume(run_id, card.interrupt_id, APPROVE)
        rest = await alice.events(run_id, after=evs[-1].sequence)
        assert types(rest)[-1] == "done"
        assert_dense(evs + rest)
        assert _answer(evs + rest) == f"Echo: echoed 0 times so far / echoed {text}"
        conn = await asyncpg.connect(fresh_dsn)
        try:
            rows = await conn.fetch("SELECT key, text FROM echoer_echo")
            assert [(r["key"].split(":")[0], r["text"]) for r in rows] == [(run_id, text)]
            assert await conn.fetchval("SELECT status FROM run WHERE id = $1", run_id) == (
                "completed"
            )
        finally:
            await conn.close()
    finally:
        runtime.terminate()


# -- AGENT_NOT_FOUND ----------------------------------------------------------------------------


async def test_an_agent_this_runtime_does_not_load_is_agent_not_found_over_grpc(
    runtime: Proc, alice_of
) -> None:
    alice = alice_of(runtime)
    conv = await alice.conversation()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        # Installed elsewhere perhaps, but not configured here: never a fallback to the default.
        await alice.stub.StartRun(
            pb.StartRunRequest(conversation_id=conv, text="hi", agent="echoer"),
            metadata=alice.md,
            timeout=10,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason(info.value) == "AGENT_NOT_FOUND"
    assert "no agent named 'echoer' is loaded (loaded: opspilot)" in (info.value.details() or "")


@pytest.fixture(scope="module")
def gateway(runtime: Proc, base_env: dict[str, str]) -> Iterator[Proc]:
    proc = start_gateway(base_env, runtime.addr, name="gateway-agents")
    yield proc
    proc.terminate()


async def test_agent_not_found_over_http_is_400(
    gateway: Proc, runtime: Proc, db: asyncpg.Connection
) -> None:
    headers = {"Authorization": f"Bearer {token(TEST_SECRET, 'alice')}"}
    async with aiohttp.ClientSession(gateway.addr, headers=headers) as http:
        async with http.get("/v1/agents") as resp:
            assert resp.status == 200
            body = await resp.json()
            assert [a["name"] for a in body["agents"]] == ["opspilot"]
        async with http.post("/v1/conversations", json={"title": "agents"}) as resp:
            assert resp.status == 201
            conv = (await resp.json())["conversation"]["id"]
        for accept in ("application/json", "text/event-stream"):
            async with http.post(
                f"/v1/conversations/{conv}/runs",
                json={"text": "hi", "agent": "nope"},
                headers={"Accept": accept},
            ) as resp:
                assert resp.status == 400, accept
                err = (await resp.json())["error"]
                assert err["code"] == "AGENT_NOT_FOUND"
                assert "nope" in err["message"]
        async with http.post(
            f"/v1/conversations/{conv}/runs", json={"text": "hi", "agent": "opspilot"}
        ) as resp:
            assert resp.status in (200, 201, 202), await resp.text()
    assert await db.fetchval("SELECT count(*) FROM run WHERE conversation_id = $1", conv) == 1


# -- a tool without an effect -------------------------------------------------------------------


def test_a_tool_without_an_effect_stops_the_runtime_at_start(
    tmp_path: Path, base_env: dict[str, str]
) -> None:

    write_package(tmp_path, "careless_pkg", CARELESS)
    env = env_with_path(
        {
            **base_env,
            "TETHER_AGENTS": "careless_pkg:agent",
            "TETHER_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        },
        tmp_path,
    )
    out = run_module("tether_runtime", env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    why = "TETHER_AGENTS=careless_pkg:agent: agent 'careless' cannot be loaded:"
    assert f"tether runtime: {why}" in out.stderr
    assert "tool 'wipe_disk' declares no effect" in out.stderr
    assert "effect='read' (changes nothing; runs at once" in out.stderr
    assert "effect='write' (changes something: needs a grant" in out.stderr
    # `tether agents` refuses it with the same words.
    listing = tether_cli("agents", env=env)
    assert listing.returncode == 2
    runtime_says = out.stderr[out.stderr.index(why) :].strip()
    assert listing.stderr.strip() == f"tether agents: {runtime_says}"


# -- the probe agent: invalid arguments, scopes, timeouts --------------------------------------


@pytest.fixture(scope="module")
def probe(admin_dsn: str, base_env: dict[str, str], tmp_path_factory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("probe")
    write_package(root, "probe_pkg", PROBE)
    dsn = asyncio.run(stores.create_fresh_database(admin_dsn))
    asyncio.run(
        _grant(
            dsn,
            [
                ("alice", "probe.store", "probe"),
                ("alice", "probe.slow", "probe"),
                ("alice", "service.deploy", "payment-api/prod"),  # prod only
            ],
        )
    )
    env = env_with_path(
        {
            **base_env,
            "DATABASE_URL": dsn,
            "TETHER_AGENTS": "probe_pkg:agent",
            "PROBE_CALLS": str(root / "calls.jsonl"),
        },
        root,
    )
    proc = start_runtime(env, name="runtime-probe")
    yield Deployment(proc, dsn, root)
    proc.terminate()
    asyncio.run(stores.drop_database(admin_dsn, dsn))


async def test_invalid_arguments_reach_neither_the_tool_nor_a_card(
    probe: Deployment, alice_of
) -> None:
    alice = alice_of(probe.runtime)
    calls = probe.root / "calls.jsonl"
    run_id = await _start(alice, "invalid", "probe")
    evs = await alice.events(run_id, until="interrupt")
    # The first card is for the corrected call: none was raised for the invalid ones.
    interrupts = [e.interrupt for e in evs if e.WhichOneof("event") == "interrupt"]
    assert len(interrupts) == 1
    assert interrupts[0].payload.tool == "store"
    assert interrupts[0].payload.parameter_summary == "n=3"
    assert _calls(calls, run_id) == []
    # The model was told, in its transcript, what was wrong with each call.
    _, cp = await _run_row(probe.dsn, run_id)
    told = _tool_messages(cp)
    assert [(m["name"], m["outcome"], m["ok"]) for m in told] == [
        ("store", "invalid", False),
        ("count", "invalid", False),
    ]
    assert told[0]["summary"] == ("invalid arguments for store: n: Input should be a valid integer")
    assert told[1]["summary"] == (
        "invalid arguments for count: n: required, missing; m: not a parameter of this tool "
        "(its parameters: n)"
    )
    # Nothing about the invalid calls became a tool_call row or a tool event.
    assert "tool_started" not in types(evs)
    conn = await asyncpg.connect(probe.dsn)
    try:
        rows = await conn.fetch("SELECT tool, args FROM tool_call WHERE run_id = $1", run_id)
        assert [(r["tool"], json.loads(r["args"])) for r in rows] == [("store", {"n": 3})]
        assert await conn.fetchval("SELECT count(*) FROM interrupt WHERE run_id = $1", run_id) == 1
    finally:
        await conn.close()
    # The corrected call runs once approved, and the run completes.
    await alice.resume(run_id, interrupts[0].interrupt_id, APPROVE)
    rest = await alice.events(run_id, after=evs[-1].sequence)
    assert types(rest)[-1] == "done"
    assert [(c["tool"], c["n"]) for c in _calls(calls, run_id)] == [("store", 3)]
    assert _answer(evs + rest).split(" | ")[-1] == "store=ok: stored 3"


async def test_a_tool_reports_progress_to_everyone_following(probe: Deployment, alice_of) -> None:
    alice = alice_of(probe.runtime)
    run_id = await _start(alice, "count", "probe")
    evs = await alice.events(run_id)
    assert types(evs)[-1] == "done"
    tool_evs = [t for t in types(evs) if t.startswith("tool_")]
    assert tool_evs == ["tool_started", "tool_progress", "tool_finished"]
    (progress,) = [e.tool_progress for e in evs if e.WhichOneof("event") == "tool_progress"]
    started = next(e.tool_started for e in evs if e.WhichOneof("event") == "tool_started")
    assert (progress.call_id, progress.tool, progress.fraction) == (started.call_id, "count", 0.5)
    # Masked like every text a tool hands out.
    assert progress.text == "half way to 2, password=***"
    assert_dense(evs)


async def test_a_grant_for_prod_does_not_allow_staging(probe: Deployment, alice_of) -> None:
    alice = alice_of(probe.runtime)
    calls = probe.root / "calls.jsonl"
    staging = await _start(alice, "deploy staging", "probe")
    evs = await alice.events(staging)
    assert types(evs)[-1] == "done"
    assert "interrupt" not in types(evs)
    assert _answer(evs) == "deploy=denied: alice may not service.deploy on payment-api/staging"
    assert _calls(calls, staging) == []

    prod = await _start(alice, "deploy prod", "probe")
    evs = await alice.events(prod, until="interrupt")
    card = evs[-1].interrupt
    assert card.kind == CONFIRM_ACTION
    assert card.payload.target == "payment-api/prod"
    await alice.resume(prod, card.interrupt_id, APPROVE)
    rest = await alice.events(prod, after=evs[-1].sequence)
    assert _answer(rest) == "deploy=ok: deployed payment-api to prod"
    assert _calls(calls, prod) == [
        {"tool": "deploy", "run": prod, "attempt": 1, "service": "payment-api", "env": "prod"}
    ]


async def test_a_read_tool_that_times_out_is_retried_then_the_model_is_told(
    probe: Deployment, alice_of
) -> None:
    alice = alice_of(probe.runtime)
    run_id = await _start(alice, "slow read", "probe")
    evs = await alice.events(run_id)
    assert types(evs)[-1] == "done"
    # Limits(tool_retries=2): three calls, then the model hears it timed out and goes on.
    attempts = [c["attempt"] for c in _calls(probe.root / "calls.jsonl", run_id)]
    assert attempts == [1, 2, 3]
    assert _answer(evs) == "slow_read=error: slow_read timed out after 0.3 s"
    status, _ = await _run_row(probe.dsn, run_id)
    assert status == "completed"


async def test_a_write_tool_that_times_out_without_key_or_reconcile_asks_a_person(
    probe: Deployment, alice_of
) -> None:
    alice = alice_of(probe.runtime)
    run_id = await _start(alice, "slow write", "probe")
    evs = await alice.events(run_id, until="interrupt")
    card = evs[-1].interrupt
    assert card.kind == CONFIRM_ACTION
    await alice.resume(run_id, card.interrupt_id, APPROVE)
    rest = await alice.events(run_id, after=evs[-1].sequence, until="interrupt")
    unknown = rest[-1].interrupt
    assert rest[-1].WhichOneof("event") == "interrupt"
    assert unknown.kind == OUTCOME_UNKNOWN
    assert unknown.payload.tool == "slow_write"
    assert "slow_write timed out after 0.3 s" in unknown.payload.details
    # Called once: the engine never calls a write again when it cannot know what it did.
    assert [c["attempt"] for c in _calls(probe.root / "calls.jsonl", run_id)] == [1]
    conn = await asyncpg.connect(probe.dsn)
    try:
        assert (
            await conn.fetchval("SELECT status FROM tool_call WHERE run_id = $1", run_id)
            == "unknown"
        )
    finally:
        await conn.close()
    status, _ = await _run_row(probe.dsn, run_id)
    assert status == "interrupted"


# -- the README's agent ------------------------------------------------------------------------

README_MARKER = "<!-- readme-agent: tests/integration/test_agent_loading.py runs this block -->"


def readme_agent() -> str:
    """The fenced Python block right after the marker in README.md."""
    text = (ROOT / "README.md").read_text()
    assert README_MARKER in text, "README.md lost the marker of its agent example"
    after = text[text.index(README_MARKER) + len(README_MARKER) :]
    found = re.match(r"\s*```python\n(.*?)\n```", after, re.S)
    assert found, "the README's agent is not a ```python block right after its marker"
    return found.group(1) + "\n"


def test_the_readme_agent_is_about_thirty_lines() -> None:
    lines = [line for line in readme_agent().splitlines() if line.strip()]
    assert 25 <= len(lines) <= 45, len(lines)


async def test_the_readme_agent_runs_as_pasted(
    tmp_path: Path, base_env: dict[str, str], fresh_dsn: str, alice_of
) -> None:
    # Pasted into a package of the user's own, outside the source tree.
    write_package(tmp_path, "my_agent", readme_agent())
    notes = tmp_path / "notes"
    env = env_with_path(
        {
            **base_env,
            "DATABASE_URL": fresh_dsn,
            "TETHER_AGENTS": "my_agent:agent",
            "NOTES_DIR": str(notes),
        },
        tmp_path,
    )
    out = tether_cli("migrate", env=env)
    assert out.returncode == 0, out.stderr
    listing = tether_cli("agents", env=env)
    assert listing.returncode == 0, listing.stderr
    assert "notes\n  from: TETHER_AGENTS=my_agent:agent\n" in listing.stdout
    await _grant(fresh_dsn, [("alice", "note.write", "notes/todo")])
    runtime = start_runtime(env, name="runtime-readme-agent")
    try:
        alice = alice_of(runtime)
        run_id = await _start(alice, "buy milk", "notes")
        evs = await alice.events(run_id, until="interrupt")
        card = evs[-1].interrupt
        assert (card.kind, card.payload.tool) == (CONFIRM_ACTION, "write_note")
        await alice.resume(run_id, card.interrupt_id, APPROVE)
        rest = await alice.events(run_id, after=evs[-1].sequence)
        assert types(rest)[-1] == "done"
        assert_dense(evs + rest)
        assert [p.read_text() for p in notes.iterdir()] == ["todo: buy milk"]
        assert "noted under todo" in _answer(evs + rest)
    finally:
        runtime.terminate()
