"""Issue 31 over Streamable HTTP: the `webops` test agent on a server written with the official
SDK's server side (tests/tether_testkit/mcp_http_server.py), its bearer token from the runtime's
environment (headers_from_env).

- read-only (`lookup`): runs at once, its progress streamed as tool_progress, Tether's key in
  the request's `_meta`;
- idempotent (`set_flag`), destructive (`delete_item`) and unannotated (`plain_send`): each a
  card (risk medium, high, high), acting only on a "yes";
- an `isError` result: a tool error the model sees;
- a server that hangs: the call ends at its timeout with a clear message while another run
  goes through;
- a server that dies mid-call (`die_send`, a write): outcome_unknown, and after the server is
  back the next call reconnects;
- the runtime SIGKILLed inside `keyed_send` (idempotent by the agent's override): the new
  runtime calls again with the same key, the server dedupes it: one effect.

One stack per module (a database, the server, two runtimes and a gateway on each) serves the
tests that kill no runtime, and the elicitation test, which kills one of them, last; the keyed
test (its server holds its answers, its runtime killed) keeps its own runtimes and server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb
from tether_runtime.store import grants
from tether_testkit import stores
from tether_testkit.client import Client, assert_dense, token, types
from tether_testkit.ledger import TESTS_DIR
from tether_testkit.mcp_http_proc import TOKEN, Server
from tether_testkit.mcp_http_server import FLOOD, SECRET_IN_LOG
from tether_testkit.processes import Proc, start_gateway, start_runtime
from tether_testkit.secrets import TEST_SECRET
from tether_testkit.security import bearer

pytestmark = [pytest.mark.process, pytest.mark.slow(seconds=26), pytest.mark.timeout(240)]


async def _grant(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await grants.add(conn, "alice", "mcp.web", "*")
    finally:
        await conn.close()


def _env(base_env: dict[str, str], dsn: str, server: Server) -> dict[str, str]:
    return {
        **base_env,
        "DATABASE_URL": dsn,
        "TETHER_AGENTS": "tether_testkit.mcp_agent:webops",
        "TETHER_DEFAULT_AGENT": "webops",
        "MCP_HTTP_URL": server.url,
        "MCP_HTTP_AUTH": f"Bearer {TOKEN}",
        "MCP_HTTP_TIMEOUT_S": "1.5",
        # An answer reaches the waiting call by NOTIFY alone: were it read by polling, the
        # elicitation test would time out.
        "TETHER_HELD_POLL_S": "600",
        "PYTHONPATH": os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH", "")])),
    }


@dataclass
class Stack:
    env: dict[str, str]
    server: Server
    rts: list[Proc]
    gws: list[Proc]


@pytest.fixture(scope="module")
async def stack(
    base_env: dict[str, str], admin_dsn: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Stack]:
    """The module's shared stack: a fresh database (alice granted mcp.web), the server, two
    runtimes and a gateway on each. Each test finds the server running and reads only its own
    rows of the server's log."""
    server = Server(tmp_path_factory.mktemp("mcp-http"))
    server.start()
    dsn = await stores.create_fresh_database(admin_dsn)
    procs: list[Proc] = []
    try:
        await _grant(dsn)
        env = _env(base_env, dsn, server)
        rts = list(
            await asyncio.gather(
                *(asyncio.to_thread(start_runtime, env, name=f"mcp-http-rt-{i}") for i in (1, 2))
            )
        )
        procs.extend(rts)
        gws = list(
            await asyncio.gather(
                *(
                    asyncio.to_thread(start_gateway, env, rt.addr, name=f"mcp-http-gw-{i}")
                    for i, rt in enumerate(rts)
                )
            )
        )
        procs.extend(gws)
        yield Stack(env, server, rts, gws)
    finally:
        for p in procs:
            p.kill()
        server.stop()
        await stores.drop_database(admin_dsn, dsn)


@pytest.fixture
def shared(stack: Stack) -> Stack:
    if not stack.server.running():
        stack.server.start()
    stack.server.mark()
    return stack


def _call(tool: str, **args: Any) -> str:
    return f"call {tool} {json.dumps(args)}"


def _said(evs: list[events_pb2.RunEvent]) -> str:
    return "".join(e.text_delta.delta for e in evs if types([e]) == ["text_delta"])


async def _start(c: Client, text: str) -> str:
    conv = await c.conversation()
    return str((await c.start(conv, text)).run.id)


async def _card(c: Client, text: str) -> tuple[str, events_pb2.RunEvent]:
    run_id = await _start(c, text)
    evs = await c.events(run_id, until="interrupt")
    assert types(evs)[-1] == "interrupt", types(evs)
    return run_id, evs[-1]


async def test_each_kind_of_tool_and_a_server_that_hangs_or_dies(shared: Stack) -> None:
    server = shared.server
    c = Client(shared.rts[0].addr, token(TEST_SECRET, "alice"))
    try:
        # Read-only: at once, with its progress, the key in _meta.
        run_id = await _start(c, _call("web__lookup", q="alpha"))
        evs = await c.events(run_id)
        assert types(evs)[-1] == "done" and "interrupt" not in types(evs), types(evs)
        assert "web__lookup ended: ok: found alpha" in _said(evs)
        progress = [e.tool_progress for e in evs if types([e]) == ["tool_progress"]]
        assert [(p.fraction, p.text) for p in progress] == [(0.5, "halfway")]
        assert_dense(evs)
        (row,) = server.rows("lookup", "call")
        assert row["key"] and row["key"].startswith(run_id)

        # An isError result: a tool error the model sees.
        evs = await c.events(await _start(c, _call("web__broken")))
        assert "web__broken ended: error" in _said(evs), _said(evs)

        # Writes: a card each, risk from destructiveHint (absent: destructive); act on "yes".
        risks = {}
        for tool, args in (
            ("web__set_flag", {"name": "f1"}),
            ("web__delete_item", {"item": "i1"}),
            ("web__plain_send", {"to": "bob"}),
        ):
            run_id, intr = await _card(c, _call(tool, **args))
            assert intr.interrupt.kind == resources_pb2.INTERRUPT_KIND_CONFIRM_ACTION
            risks[tool] = intr.interrupt.payload.risk
            short = tool.removeprefix("web__")
            assert server.rows(short, "call") == [], "nothing called before the approval"
            decision = (
                events_pb2.DECISION_REJECTED
                if tool == "web__delete_item"
                else events_pb2.DECISION_APPROVED
            )
            await c.resume(run_id, intr.interrupt.interrupt_id, decision)
            rest = await c.events(run_id, after=intr.sequence)
            assert types(rest)[-1] == "done", types(rest)
            expected = 0 if tool == "web__delete_item" else 1
            assert len(server.rows(short, "effect")) == expected, tool
        assert risks == {
            "web__set_flag": "medium",
            "web__delete_item": "high",
            "web__plain_send": "high",
        }
        # The title the server gave is the card's title.
        _, intr = await _card(c, _call("web__set_flag", name="f2"))
        assert intr.interrupt.payload.title == "Set a flag"

        # A server that hangs: the call ends at its timeout (1.5 s, once more as a read), while
        # another run goes through meanwhile.
        t0 = time.monotonic()
        hung = await _start(c, _call("web__hang"))
        await asyncio.sleep(0.3)
        quick = await _start(c, _call("web__lookup", q="beta"))
        evs = await c.events(quick)
        quick_s = time.monotonic() - t0
        assert "found beta" in _said(evs)
        evs = await c.events(hung)
        hung_s = time.monotonic() - t0
        assert "web__hang ended: error" in _said(evs), _said(evs)
        assert "timed out after 1.5 s" in _said(evs), _said(evs)
        assert quick_s < 2.5 < hung_s, (quick_s, hung_s)

        # A server that dies inside a write: nobody can tell; a person decides.
        run_id, intr = await _card(c, _call("web__die_send", to="carol"))
        await c.resume(run_id, intr.interrupt.interrupt_id)
        rest = await c.events(run_id, after=intr.sequence, until="interrupt")
        raised = rest[-1].interrupt
        assert raised.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, types(rest)
        assert "MCP_CONNECTION_LOST" in raised.payload.details, raised.payload.details
        assert len(server.rows("die_send", "effect")) == 1
        server.start()  # back on its port; the next call connects again
        await c.resume(run_id, raised.interrupt_id, events_pb2.DECISION_ABANDON)
        rest = await c.events(run_id, after=rest[-1].sequence)
        assert "ended: abandoned" in _said(rest), _said(rest)
        assert len(server.rows("die_send", "call")) == 1, "never called again"
        evs = await c.events(await _start(c, _call("web__lookup", q="gamma")))
        assert "found gamma" in _said(evs), _said(evs)
    finally:
        await c.close()


async def test_a_refused_connection_is_not_a_call(shared: Stack) -> None:
    """The server gone before a write is sent (its port refuses the connection): nothing was
    sent, so nothing happened: MCP_SERVER_UNAVAILABLE, a failed call the model sees, no
    outcome_unknown card. A write whose connection is lost after it was sent is the other case
    (test_each_kind_of_tool_and_a_server_that_hangs_or_dies: outcome_unknown)."""
    server = shared.server
    c = Client(shared.rts[0].addr, token(TEST_SECRET, "alice"))
    try:
        evs = await c.events(await _start(c, _call("web__lookup", q="alpha")))
        assert "found alpha" in _said(evs), _said(evs)  # connected, the session in use
        run_id, intr = await _card(c, _call("web__plain_send", to="frank"))
        server.stop()  # the port refuses connections from now on
        await c.resume(run_id, intr.interrupt.interrupt_id)
        rest = await c.events(run_id, after=intr.sequence, until="interrupt")
        assert types(rest)[-1] == "done", "nothing to decide: it was not sent: " + str(types(rest))
        said = _said(rest)
        assert "web__plain_send ended: error" in said and "MCP_SERVER_UNAVAILABLE" in said, said
        assert server.rows("plain_send", "call") == []
    finally:
        await c.close()


async def _holder(env: dict[str, str], run_id: str) -> str:
    """The lease owner of the run (host:pid:id), as the store says."""
    conn = await asyncpg.connect(env["DATABASE_URL"])
    try:
        return str(await conn.fetchval("SELECT lease_owner FROM run WHERE id = $1", run_id))
    finally:
        await conn.close()


async def test_elicitation_is_a_card_answered_on_another_pod(shared: Stack) -> None:
    """A server's `elicitation/create` during a call: a provide_input card (the requested schema
    its form), the run interrupted while the call waits in the worker that holds it (past the
    tool's own 1.5 s timeout: a person's time does not count), answered through a gateway on
    the OTHER runtime; accept / decline / cancel go back as MCP's own; a wrong answer is
    refused and changes nothing. The worker SIGKILLed while the person thinks: its card expires
    once its lease runs out, and the call follows the rules: the write (`transfer`) raises
    outcome_unknown (acted nowhere). (A read whose waiter dies is called again: the same
    recovery path as any read, not exercised here.) The last test on the module's stack: it
    kills one of its runtimes."""
    env, server, rts, gws = shared.env, shared.server, shared.rts, shared.gws
    pids = [str(rt.popen.pid) for rt in rts]
    c = Client(rts[0].addr, token(TEST_SECRET, "alice"))
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def answer(run_id: str, card: Any, decision: str, **more: Any) -> tuple[int, Any]:
        """Through the gateway of the runtime that does NOT hold the run."""
        owner = await _holder(env, run_id)
        other = 1
        if owner != "None":  # a question of a call in progress: its worker holds the run
            other = 1 if owner.split(":")[1] == pids[0] else 0
            assert owner.split(":")[1] == pids[1 - other], owner
        body = {
            "interruptId": card.interrupt_id,
            "decision": decision,
            "idempotencyKey": uuid.uuid4().hex,
            **more,
        }
        url = f"{gws[other].addr}/v1/runs/{run_id}/resume"
        async with http.post(url, json=body, headers=bearer("alice")) as r:
            return r.status, await r.json(content_type=None)

    async def asked(run_id: str, after: int = 0) -> events_pb2.RunEvent:
        evs = await c.events(run_id, after=after, until="interrupt")
        assert types(evs)[-1] == "interrupt", types(evs)
        return evs[-1]

    try:
        # Accept, after longer than the tool's timeout; a wrong answer first changes nothing.
        run_id = await _start(c, _call("web__greet"))
        raised = await asked(run_id)
        card = raised.interrupt
        assert card.kind == resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT
        assert card.payload.details == "Whom should I greet?"
        assert card.payload.title == "web asks"
        schema = json.loads(card.payload.input_schema_json)
        assert schema["properties"]["name"]["type"] == "string", schema
        async with http.get(f"{gws[0].addr}/v1/runs/{run_id}", headers=bearer("alice")) as r:
            assert (await r.json())["run"]["status"] == "interrupted"
        await asyncio.sleep(2.0)
        status, data = await answer(run_id, card, "respond", fill={"name": 5})
        assert status == 422, data
        status, data = await answer(run_id, card, "respond", fill={"name": "Ada"})
        assert status == 202, data
        rest = await c.events(run_id, after=raised.sequence)
        assert types(rest)[-1] == "done", types(rest)
        assert "web__greet ended: ok: hello Ada" in _said(rest), _said(rest)
        assert_dense(await c.events(run_id))
        # Decline and cancel (reject and abandon), as MCP's own actions.
        for decision, action in (("reject", "decline"), ("abandon", "cancel")):
            run_id = await _start(c, _call("web__greet"))
            raised = await asked(run_id)
            status, data = await answer(run_id, raised.interrupt, decision)
            assert status == 202, data
            rest = await c.events(run_id, after=raised.sequence)
            assert f"web__greet ended: ok: nobody greeted: {action}" in _said(rest), _said(rest)
        actions = [r["args"]["action"] for r in server.rows("greet", "answer")]
        assert actions == ["accept", "decline", "cancel"], actions

        # A write that asks, its worker killed while the person thinks: outcome_unknown.
        run_id = await _start(c, _call("web__transfer", to="erin"))
        confirm = await asked(run_id)
        status, data = await answer(run_id, confirm.interrupt, "approve")
        assert status == 202, data
        raised = await asked(run_id, after=confirm.sequence)
        assert raised.interrupt.kind == resources_pb2.INTERRUPT_KIND_PROVIDE_INPUT
        owner = await _holder(env, run_id)
        dead = 0 if owner.split(":")[1] == pids[0] else 1
        rts[dead].kill()
        live = Client(rts[1 - dead].addr, token(TEST_SECRET, "alice"))
        try:
            rest = await live.events(run_id, after=raised.sequence, until="interrupt", timeout=40)
            unknown = rest[-1].interrupt
            assert unknown.kind == resources_pb2.INTERRUPT_KIND_OUTCOME_UNKNOWN, types(rest)
            resolved = [e.interrupt_resolved for e in rest if types([e]) == ["interrupt_resolved"]]
            assert [r.decision for r in resolved] == [events_pb2.DECISION_EXPIRED], resolved
            assert server.rows("transfer", "effect") == []
            assert server.rows("transfer", "answer") == [], "never called again"
            await live.resume(run_id, unknown.interrupt_id, events_pb2.DECISION_ABANDON)
            end = await live.events(run_id, after=rest[-1].sequence)
            assert "web__transfer ended: abandoned" in _said(end), _said(end)
        finally:
            await live.close()
    finally:
        await http.close()
        await c.close()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()


@pytest.fixture
async def own_env(
    base_env: dict[str, str], admin_dsn: str, own_server: Server
) -> AsyncIterator[dict[str, str]]:
    dsn = await stores.create_fresh_database(admin_dsn)
    await _grant(dsn)
    yield _env(base_env, dsn, own_server)
    await stores.drop_database(admin_dsn, dsn)


async def test_runtime_killed_inside_a_keyed_call_calls_again_with_the_key(
    own_env: dict[str, str], procs: list[Proc], own_server: Server
) -> None:
    """Its own server (it holds its answers 6 s), database and runtimes: it kills one."""
    env, server = own_env, own_server
    server.start(MCP_HTTP_HOLD_S="6")
    first = start_runtime(env, name="mcp-http-rt-1")
    procs.append(first)
    c = Client(first.addr, token(TEST_SECRET, "alice"))
    run_id, intr = await _card(c, _call("web__keyed_send", to="dave"))
    # The card's target is the agent's scope template over the arguments.
    assert intr.interrupt.payload.target == "dave"
    await c.resume(run_id, intr.interrupt.interrupt_id)
    deadline = time.monotonic() + 20
    while not server.rows("keyed_send", "effect"):
        assert time.monotonic() < deadline, "the call never acted"
        await asyncio.sleep(0.05)
    first.kill()  # SIGKILL while the server holds its answer
    await c.close()
    second = start_runtime(env, name="mcp-http-rt-2")
    procs.append(second)
    c = Client(second.addr, token(TEST_SECRET, "alice"))
    try:
        rest = await c.events(run_id, after=intr.sequence)
        assert types(rest)[-1] == "done", types(rest)
        assert "interrupt" not in types(rest), "no person was needed"
        assert "web__keyed_send ended: ok: already sent to dave" in _said(rest), _said(rest)
        calls = server.rows("keyed_send", "call")
        assert len(calls) == 2 and len({r["key"] for r in calls}) == 1, calls
        assert len(server.rows("keyed_send", "effect")) == 1
    finally:
        await c.close()


async def _tool_names(c: Client) -> set[str]:
    r = await c.stub.ListAgents(pb.ListAgentsRequest(), metadata=c.md, timeout=10)
    return {t.name for a in r.agents if a.name == "webops" for t in a.tools}


def _json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            found = json.loads(line)
            if isinstance(found, dict):
                out.append(found)
    return out


async def test_a_servers_log_goes_to_the_runs_log_and_its_tool_list_changes_reach_runs(
    own_env: dict[str, str], procs: list[Proc], own_server: Server
) -> None:
    """- `noisy` logs a key, then a flood: the runtime's log has the line with the run's id and
      the key masked, and keeps at most a burst of the flood, the rest counted as dropped;
    - `grow` adds late_lookup and removes early_lookup (on protocol 2026-07-28 the server says
      so on each session's subscriptions/listen stream): both runtimes list the agent's tools
      again, not only the one whose call changed them; a run started after calls the new tool,
      the removed one is refused."""
    env, server = own_env, own_server
    server.start()
    rt = start_runtime(env, name="mcp-http-rt-log-1")
    procs.append(rt)
    c = Client(rt.addr, token(TEST_SECRET, "alice"))
    c2: Client | None = None
    try:
        run_id = await _start(c, _call("web__noisy", q="gamma"))
        evs = await c.events(run_id)
        assert "web__noisy ended: ok: noisy found gamma" in _said(evs), _said(evs)
        lines: list[dict[str, Any]] = []
        deadline = time.monotonic() + 20
        while True:
            lines = [
                r
                for r in _json_lines(rt.log())
                if r.get("logger") == "tether_runtime.engine.mcp.server_log"
            ]
            dropped = sum(
                int(r["msg"].split(": ", 1)[1].split(" ", 1)[0])
                for r in lines
                if "log lines dropped" in r["msg"]
            )
            kept = [r for r in lines if " logged" in r["msg"]]
            if len(kept) + dropped >= 1 + FLOOD:
                break
            assert time.monotonic() < deadline, (len(kept), dropped)
            await asyncio.sleep(0.1)
        assert len(kept) + dropped == 1 + FLOOD
        assert SECRET_IN_LOG not in rt.log()
        first = kept[0]
        assert first["run_id"] == run_id and first["tool"] == "noisy", first
        assert first["mcp_server"] == "web" and first["level"] == "warning", first
        assert "connecting with api_key" in first["msg"] and "gamma" in first["msg"], first
        assert all(r.get("run_id") == run_id for r in lines), "every line is the run's"
        assert dropped > 0 and len(kept) < 1 + FLOOD, "the flood is bounded"

        # The tool list changes mid-session, with a second runtime connected to the server (the
        # runs from here on may run on either).
        other = await asyncio.to_thread(start_runtime, env, name="mcp-http-rt-log-2")
        procs.append(other)
        c2 = Client(other.addr, token(TEST_SECRET, "alice"))
        names = await _tool_names(c)
        assert "web__early_lookup" in names and "web__late_lookup" not in names
        evs = await c.events(await _start(c, _call("web__grow")))
        assert "web__grow ended: ok: tools changed" in _said(evs), _said(evs)
        for client in (c, c2):
            deadline = time.monotonic() + 20
            while True:
                names = await _tool_names(client)
                if "web__late_lookup" in names and "web__early_lookup" not in names:
                    break
                assert time.monotonic() < deadline, f"never listed again: {sorted(names)}"
                await asyncio.sleep(0.1)
        evs = await c.events(await _start(c, _call("web__late_lookup", q="delta")))
        assert "web__late_lookup ended: ok: late found delta" in _said(evs), _said(evs)
        evs = await c.events(await _start(c, _call("web__early_lookup", q="delta")))
        said = _said(evs)
        assert "web__early_lookup ended: blocked: web__early_lookup: no such tool" in said, said
    finally:
        await c.close()
        if c2 is not None:
            await c2.close()
